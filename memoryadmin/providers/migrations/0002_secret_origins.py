"""Secrets are bound to the origins they may be sent to.

A secret set before this migration is bound to the origins of the http
declarations (resources of its project and environment) that reference it;
a secret that none references is bound to no origin and is sent nowhere
until it is set again with `--origin`.
"""

from typing import Any

from django.db import migrations, models


def bind_to_declared_origins(apps: Any, schema_editor: Any) -> None:
    Secret = apps.get_model("providers", "Secret")
    Resource = apps.get_model("memory", "Resource")
    for secret in Secret.objects.all():
        origins = set()
        resources = Resource.objects.filter(
            project_id=secret.project_id, environment=secret.environment, kind="http"
        )
        for resource in resources:
            connection = (resource.config or {}).get("connection") or {}
            for value in (connection.get("headers") or {}).values():
                if isinstance(value, dict) and value.get("secret") == secret.name:
                    origins.add(connection.get("origin"))
        secret.origins = sorted(origin for origin in origins if isinstance(origin, str))
        secret.save(update_fields=["origins"])


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0001_initial"),
        ("providers", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="secret",
            name="origins",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.RunPython(bind_to_declared_origins, migrations.RunPython.noop),
    ]
