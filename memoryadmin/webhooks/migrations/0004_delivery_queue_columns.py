from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("webhooks", "0003_delivery_jobs")]

    operations = [
        migrations.RemoveField(model_name="delivery", name="attempts"),
        migrations.RemoveField(model_name="delivery", name="lease_until"),
        migrations.RemoveField(model_name="delivery", name="next_attempt_at"),
    ]
