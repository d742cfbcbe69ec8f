"""Deliveries by state and last attempt: housekeeping removes delivered and failed ones past
their days.

Built concurrently on PostgreSQL (core/indexes.py): writes go on while it is built."""

from __future__ import annotations

from django.db import migrations, models

from memoryadmin.core.indexes import AddIndexOnline


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("webhooks", "0004_delivery_queue_columns")]

    operations = [
        AddIndexOnline(
            model_name="delivery",
            index=models.Index(fields=["state", "last_attempt_at"], name="webhook_delivery_finished"),
        ),
    ]
