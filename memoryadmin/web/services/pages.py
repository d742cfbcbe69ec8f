"""What the Memory page reads: versions by revision and the audit log."""

from __future__ import annotations

from django.db.models import Q

from memoryadmin.memory.cursors import newest_first_page
from memoryadmin.memory.errors import NotFound
from memoryadmin.memory.limits import check_environment
from memoryadmin.memory.models import AuditEntry, Document, DocumentVersion, Project, Resource

AUDIT_PAGE_SIZE = 50


def version_get(*, document: Document, revision: str) -> DocumentVersion:
    version = DocumentVersion.objects.filter(document=document, revision=revision).first()
    if version is None:
        raise NotFound(f"Document '{document.doc_id}' has no version '{revision}'.")
    return version


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
    return newest_first_page(entries, cursor=cursor, scope=scope, limit=limit)


def resource_ids(*, project: Project, environment: str, kind: str | None = None) -> list[str]:
    """The resource ids of an environment, retired ones included."""
    check_environment(environment)
    rows = Resource.objects.filter(project=project, environment=environment)
    if kind is not None:
        rows = rows.filter(kind=kind)
    return list(rows.order_by("resource_id").values_list("resource_id", flat=True))
