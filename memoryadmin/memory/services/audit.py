from __future__ import annotations

from typing import Any

from memoryadmin.memory.models import AuditEntry


def audit_record(
    *,
    project_id: str,
    environment: str,
    actor: str,
    action: str,
    resource_id: str = "",
    document_id: str = "",
    revision: str = "",
    detail: dict[str, Any] | None = None,
) -> AuditEntry:
    return AuditEntry.objects.create(
        project_id=project_id,
        environment=environment,
        actor=actor,
        action=action,
        resource_id=resource_id,
        document_id=document_id,
        revision=revision,
        detail=detail or {},
    )
