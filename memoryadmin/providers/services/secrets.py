"""Managed secrets per (project, environment, name).

A value goes in and is sent to providers as a header; it never comes back
out: listing returns names, and no message, audit entry or log line holds it.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TypedDict

from django.db import transaction
from django.views.decorators.debug import sensitive_variables

from memoryadmin.memory.environments import check_environment
from memoryadmin.memory.errors import InvalidRequest
from memoryadmin.memory.models import Project
from memoryadmin.memory.services.audit import audit_record
from memoryadmin.providers.declarations import SECRET_NAME_RE
from memoryadmin.providers.errors import SecretNotFound
from memoryadmin.providers.models import Secret

SECRET_VALUE_MAX = 4096
# Values travel as HTTP header values: visible ASCII, spaces and tabs only.
SECRET_VALUE_RE = re.compile(r"[\x20-\x7e\t]+")


class SecretInfo(TypedDict):
    name: str
    updated_at: datetime


def check_secret_name(value: object) -> str:
    if not isinstance(value, str) or not SECRET_NAME_RE.fullmatch(value):
        raise InvalidRequest(
            "Secret names are 1-64 letters, digits or underscores, not starting with a digit."
        )
    return value


@sensitive_variables("value")
def _check_value(value: object) -> str:
    # The messages describe the value's shape only; they never quote it.
    if not isinstance(value, str) or value == "":
        raise InvalidRequest("The secret value must be a nonempty string.")
    if len(value) > SECRET_VALUE_MAX:
        raise InvalidRequest(f"The secret value is over {SECRET_VALUE_MAX} characters.")
    if not SECRET_VALUE_RE.fullmatch(value):
        raise InvalidRequest(
            "The secret value must be printable ASCII (it is sent as a header value); "
            "line breaks and control characters are not allowed."
        )
    return value


# Error reports (the debug page, mailed tracebacks) show these variables masked.
@sensitive_variables("value", "checked", "secret")
@transaction.atomic
def secret_set(*, project: Project, environment: str, name: str, value: object, actor: str) -> bool:
    """Creates or replaces a secret; True when it is new."""
    check_environment(environment)
    check_secret_name(name)
    checked = _check_value(value)
    secret, created = Secret.objects.select_for_update().get_or_create(
        project=project, environment=environment, name=name, defaults={"value": checked}
    )
    if not created:
        secret.value = checked
        secret.save(update_fields=["value", "updated_at"])
    audit_record(
        project_id=project.id,
        environment=environment,
        actor=actor,
        action="secret.set",
        detail={"name": name, "created": created},
    )
    return created


def secret_list(*, project: Project, environment: str) -> list[SecretInfo]:
    check_environment(environment)
    rows = Secret.objects.filter(project=project, environment=environment).order_by("name")
    return [
        SecretInfo(name=name, updated_at=updated_at)
        for name, updated_at in rows.values_list("name", "updated_at")
    ]


@transaction.atomic
def secret_delete(*, project: Project, environment: str, name: str, actor: str) -> None:
    check_environment(environment)
    check_secret_name(name)
    deleted, _ = Secret.objects.filter(project=project, environment=environment, name=name).delete()
    if not deleted:
        raise SecretNotFound(f"No secret '{name}' in {environment}.")
    audit_record(
        project_id=project.id,
        environment=environment,
        actor=actor,
        action="secret.delete",
        detail={"name": name},
    )


@sensitive_variables("value")
def secret_resolve(*, project_id: str, environment: str, name: str) -> str:
    value = (
        Secret.objects.filter(project_id=project_id, environment=environment, name=name)
        .values_list("value", flat=True)
        .first()
    )
    if value is None:
        raise SecretNotFound(f"Secret '{name}' is not set in {environment}.")
    return value
