"""The provider operations each incident's containment report names, so that the
operations' retention keeps them as long as the report: those of the reports already
stored, read from them."""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

BATCH = 500


def forward(apps: Any, schema_editor: Any) -> None:
    incident_model = apps.get_model("incidents", "Incident")
    named_model = apps.get_model("incidents", "NamedOperation")
    rows = []
    contained = incident_model.objects.exclude(contained_at=None)
    for incident_id, report in contained.values_list("id", "containment").iterator(
        chunk_size=BATCH
    ):
        for operation_id in sorted(set(report.get("deadLetters", []))):
            rows.append(named_model(incident_id=incident_id, operation_id=operation_id))
        if len(rows) >= BATCH:
            named_model.objects.bulk_create(rows)
            rows = []
    named_model.objects.bulk_create(rows)


class Migration(migrations.Migration):
    dependencies = [
        ("incidents", "0001_initial"),
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
                    "incident",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="operations",
                        to="incidents.incident",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["operation_id"], name="incident_named_operation")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("incident", "operation_id"), name="incident_operation"
                    )
                ],
            },
        ),
        migrations.RunPython(forward, migrations.RunPython.noop),
    ]
