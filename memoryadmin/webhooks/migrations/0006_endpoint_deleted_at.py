"""When an endpoint was deleted: its row stays, inactive, until the job its deletion
queued has removed its deliveries a batch at a time, then goes too."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("webhooks", "0005_delivery_finished_index")]

    operations = [
        migrations.AddField(
            model_name="endpoint",
            name="deleted_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
