"""Managed secrets per (project, environment, name), each bound to the origins it may go to.

A value goes in and is sent to providers as a header; it never comes back
out: listing returns names and origins, and no message, audit entry or log
line holds it. A secret is sent only to the origins it was set for, and a
server-level secret (the reference provider's token) only to the built-in
reference provider: checked when a declaration is promoted and again on
every call.
"""

from __future__ import annotations

import hmac
import re
from datetime import datetime
from typing import Any, TypedDict

from django.db import transaction
from django.views.decorators.debug import sensitive_variables

from memoryadmin.core.environments import check_environment
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.memory.models import Project
from memoryadmin.memory.services.audit import audit_record
from memoryadmin.memory.services.projects import project_cap
from memoryadmin.providers.declarations import (
    SECRET_NAME_RE,
    SERVER_SECRETS,
    origin_check,
    server_secret_refusal,
)
from memoryadmin.providers.errors import SecretNotBound, SecretNotFound
from memoryadmin.providers.models import Secret

SECRET_VALUE_MAX = 4096
ORIGINS_MAX = 16
# Secrets of one project in one environment (replacing one is never refused).
SECRETS_MAX = 100
# Values travel as HTTP header values: visible ASCII, spaces and tabs only.
SECRET_VALUE_RE = re.compile(r"[\x20-\x7e\t]+")


class SecretInfo(TypedDict):
    name: str
    origins: list[str]
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


def check_origins(value: object) -> list[str]:
    """1-16 origins a secret may be sent to, normalised as declarations normalise them."""
    if not isinstance(value, list) or not value:
        raise InvalidRequest(
            "origins is required: the origins the secret may be sent to, "
            "such as ['https://memory.example.com']."
        )
    if len(value) > ORIGINS_MAX:
        raise InvalidRequest(f"origins may list at most {ORIGINS_MAX} origins, not {len(value)}.")
    return sorted({origin_check(item, where=f"origins[{i}]") for i, item in enumerate(value)})


# Error reports (the debug page, mailed tracebacks) show these variables masked.
@sensitive_variables("value", "checked", "secret")
@transaction.atomic
def secret_set(
    *,
    project: Project,
    environment: str,
    name: str,
    value: object,
    actor: str,
    origins: object = None,
    server_level: bool = False,
) -> bool:
    """Creates or replaces a secret; True when it is new. Setting the value and origins
    it has already writes nothing and is not audited.

    `origins` is required for a new secret; for an existing one, None keeps
    its origins. Server-level names (the reference provider's token) are
    refused unless `server_level`, which only server code passes (`manage.py
    demo`); the API and the CLI never do.
    """
    if name in SERVER_SECRETS and not server_level:
        raise InvalidRequest(
            f"{name} is a server-level secret: the server sets it for the built-in "
            "reference provider; choose another name."
        )
    if server_level and name not in SERVER_SECRETS:
        raise InvalidRequest(f"{name} is not a server-level secret.")
    check_environment(environment)
    check_secret_name(name)
    checked = _check_value(value)
    bound = None if origins is None else check_origins(origins)
    project_cap(
        project_id=project.pk,
        # Replacing one is never refused: the others are what count.
        held=Secret.objects.filter(project=project, environment=environment).exclude(name=name),
        cap=SECRETS_MAX,
        message=f"A project has at most {SECRETS_MAX} secrets in {environment}; delete one first.",
    )
    secret, created = Secret.objects.select_for_update().get_or_create(
        project=project,
        environment=environment,
        name=name,
        defaults={"value": checked, "origins": bound or []},
    )
    if created and bound is None:
        # Rolled back with the row just created.
        check_origins(None)
    if not created:
        origins_kept = bound is None or bound == secret.origins
        if origins_kept and hmac.compare_digest(secret.value.encode(), checked.encode()):
            return False
        secret.value = checked
        if bound is not None:
            secret.origins = bound
        secret.save(update_fields=["value", "origins", "updated_at"])
    audit_record(
        project_id=project.id,
        environment=environment,
        actor=actor,
        action="secret.set",
        detail={"name": name, "created": created, "origins": secret.origins},
    )
    return created


def secret_list(*, project: Project, environment: str) -> list[SecretInfo]:
    check_environment(environment)
    rows = Secret.objects.filter(project=project, environment=environment).order_by("name")
    return [
        SecretInfo(name=name, origins=origins, updated_at=updated_at)
        for name, origins, updated_at in rows.values_list("name", "origins", "updated_at")
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
    """The value of a secret, for the server's own comparisons; never for sending."""
    value = (
        Secret.objects.filter(project_id=project_id, environment=environment, name=name)
        .values_list("value", flat=True)
        .first()
    )
    if value is None:
        raise SecretNotFound(f"Secret '{name}' is not set in {environment}.")
    return value


def _binding_refusal(name: str, origins: list[str] | None, origin: str, path: str) -> str | None:
    """Why secret `name` (bound to `origins`; None: not set) may not go to origin + path."""
    refusal = server_secret_refusal(name, path)
    if refusal is not None:
        return refusal
    if origins is not None and origin not in origins:
        bound = ", ".join(origins) or "no origin"
        return (
            f"would send secret {name} to {origin}, but the secret may be sent only to {bound}; "
            f"set it again with that origin to allow it"
        )
    return None


def secret_bindings_check(
    *, project: Project, environment: str, provider: dict[str, Any], where: str
) -> None:
    """Every secret a declaration sends may go to its origin (secrets not set yet: when used)."""
    connection = provider["connection"]
    references = {
        header: value["secret"]
        for header, value in connection.get("headers", {}).items()
        if isinstance(value, dict)
    }
    bound = dict(
        Secret.objects.filter(
            project=project, environment=environment, name__in=set(references.values())
        ).values_list("name", "origins")
    )
    for header, name in references.items():
        refusal = _binding_refusal(name, bound.get(name), connection["origin"], provider["path"])
        if refusal is not None:
            raise InvalidRequest(f"{where}.connection.headers.{header} {refusal}.")


@sensitive_variables("row")
def secret_for_request(
    *, project_id: str, environment: str, name: str, origin: str, path: str
) -> str:
    """The value of a secret about to be sent to origin + path; refused when it may not go there."""
    row = (
        Secret.objects.filter(project_id=project_id, environment=environment, name=name)
        .values_list("value", "origins")
        .first()
    )
    if row is None:
        raise SecretNotFound(f"Secret '{name}' is not set in {environment}.")
    refusal = _binding_refusal(name, row[1], origin, path)
    if refusal is not None:
        raise SecretNotBound(f"The connection {refusal}.")
    return str(row[0])
