"""The provider operations each receipt names, so that the operations' retention keeps
them as long as the receipt: those of the receipts already stored, read from them."""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

BATCH = 500


def named(receipt: dict[str, Any]) -> set[str]:
    external = receipt.get("external", {})
    return {
        entry["operation"]
        for outcome in ("queued", "failed")
        for entry in external.get(outcome, [])
        if entry.get("operation")
    }


def forward(apps: Any, schema_editor: Any) -> None:
    erasure_model = apps.get_model("erasures", "Erasure")
    named_model = apps.get_model("erasures", "NamedOperation")
    rows = []
    for erasure_id, signed in erasure_model.objects.values_list("id", "signed").iterator(
        chunk_size=BATCH
    ):
        for operation_id in sorted(named(signed["receipt"])):
            rows.append(named_model(erasure_id=erasure_id, operation_id=operation_id))
        if len(rows) >= BATCH:
            named_model.objects.bulk_create(rows)
            rows = []
    named_model.objects.bulk_create(rows)


class Migration(migrations.Migration):
    dependencies = [
        ("erasures", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="NamedOperation",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("operation_id", models.CharField(max_length=40)),
                (
                    "erasure",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="operations",
                        to="erasures.erasure",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["operation_id"], name="erasure_named_operation")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("erasure", "operation_id"), name="erasure_operation"
                    )
                ],
            },
        ),
        migrations.RunPython(forward, migrations.RunPython.noop),
    ]
