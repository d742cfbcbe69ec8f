"""An operation keeps the recall its session's write answered, so the session's
`record.saved` can be written with it when the provider finishes the write."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("agents", "0012_operation_settled_index")]

    operations = [
        migrations.AddField(
            model_name="provideroperation",
            name="recall_id",
            field=models.CharField(blank=True, db_default="", max_length=40),
        ),
    ]
