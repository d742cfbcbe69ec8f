"""A record's delete is claimed while it is sent, so two at once send one."""

from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0013_operation_recall"),
        ("memory", "0015_project_erasure_epoch"),
    ]

    operations = [
        migrations.CreateModel(
            name="RecordDeleteClaim",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("namespace", models.CharField(max_length=128)),
                ("record_id", models.CharField(max_length=128)),
                ("claimed_at", models.DateTimeField()),
                (
                    "resource",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="memory.resource",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("resource", "namespace", "record_id"), name="record_delete_claim"
                    )
                ],
            },
        ),
    ]
