from __future__ import annotations

from typing import Any

from django.db.models import Q

from memoryadmin.memory.cursors import keyset_page
from memoryadmin.memory.environments import check_environment
from memoryadmin.memory.models import AuditEntry, Project

AUDIT_PAGE_SIZE = 50


def audit_record(
    *,
    project_id: str | None,
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


def audit_list(
    *,
    project: Project,
    environment: str,
    resource_id: str = "",
    document_id: str = "",
    cursor: str | None = None,
    limit: int = AUDIT_PAGE_SIZE,
) -> tuple[list[AuditEntry], str | None]:
    """Newest first, in keyset pages; project-wide entries (roles, deployments) included
    unless the list is narrowed to a resource or document."""
    check_environment(environment)
    scope = f"audit:{project.id}:{environment}:{resource_id}:{document_id}"
    entries = AuditEntry.objects.filter(project=project)
    if resource_id or document_id:
        entries = entries.filter(environment=environment)
        if resource_id:
            entries = entries.filter(resource_id=resource_id)
        if document_id:
            entries = entries.filter(document_id=document_id)
    else:
        entries = entries.filter(Q(environment=environment) | Q(environment=""))
    return keyset_page(entries, order=("-id",), cursor=cursor, scope=scope, limit=limit)
