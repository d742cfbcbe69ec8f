"""Operations by state and last change: housekeeping removes settled ones past their days.

Built concurrently on PostgreSQL (core/indexes.py): writes go on while it is built."""

from __future__ import annotations

from django.db import migrations, models

from memoryadmin.core.indexes import AddIndexOnline


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("agents", "0011_recall_store_leaner")]

    operations = [
        AddIndexOnline(
            model_name="provideroperation",
            index=models.Index(fields=["state", "updated_at"], name="operation_settled"),
        ),
    ]
