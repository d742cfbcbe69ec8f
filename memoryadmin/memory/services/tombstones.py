"""Deleted documents: their ids stay reserved, and every door says who deleted them and when."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from memoryadmin.core.errors import NotFound, PreconditionFailed
from memoryadmin.memory.limits import check_document_id
from memoryadmin.memory.models import AuditEntry, Document, Resource
from memoryadmin.memory.services.documents import document_get


@dataclass(frozen=True)
class Tombstone:
    resource_id: str
    doc_id: str
    deleted_by: str  # the audit actor ("user:olivia", "key:mak_1234", "cli:ops"); "" if unknown
    deleted_at: datetime | None

    @property
    def sentence(self) -> str:
        who = f" by {self.deleted_by}" if self.deleted_by else ""
        when = f" at {self.deleted_at:%Y-%m-%d %H:%M:%S} UTC" if self.deleted_at else ""
        return (
            f"Document '{self.doc_id}' in resource '{self.resource_id}' was deleted{who}{when}. "
            "Its text is gone and its id stays reserved: no document can be created with it again."
        )


class DocumentDeleted(NotFound):
    code = "document_deleted"

    def __init__(self, tombstone: Tombstone) -> None:
        super().__init__(tombstone.sentence)
        self.tombstone = tombstone


def tombstone_get(*, resource: Resource, doc_id: str) -> Tombstone | None:
    """The tombstone of a deleted document, None for a live or never used id."""
    row = (
        Document.objects.filter(resource=resource, doc_id=doc_id, deleted=True)
        .values("updated_at")
        .first()
    )
    if row is None:
        return None
    entry = (
        AuditEntry.objects.filter(
            project_id=resource.project_id,
            environment=resource.environment,
            resource_id=resource.resource_id,
            document_id=doc_id,
            action="document.delete",
        )
        .values("actor", "created_at")
        .first()
    )
    return Tombstone(
        resource_id=resource.resource_id,
        doc_id=doc_id,
        deleted_by=entry["actor"] if entry else "",
        deleted_at=entry["created_at"] if entry else row["updated_at"],
    )


def document_get_or_tombstone(*, resource: Resource, doc_id: str) -> Document:
    """A live document; for a deleted one, DocumentDeleted saying who deleted it and when."""
    try:
        return document_get(resource=resource, doc_id=doc_id)
    except NotFound:
        tombstone = tombstone_get(resource=resource, doc_id=doc_id)
        if tombstone is None:
            raise
        raise DocumentDeleted(tombstone) from None


def document_id_check_free(*, resource: Resource, doc_id: str) -> None:
    """Refuses an id that a live or deleted document holds, in a sentence saying which.

    Forms call it to report every mistake at once; the create itself stays guarded by
    the unique key, so an id taken between this check and the insert is still refused.
    """
    check_document_id(doc_id)
    state = Document.objects.filter(resource=resource, doc_id=doc_id).values("deleted").first()
    if state is None:
        return
    if state["deleted"]:
        raise PreconditionFailed(
            f"The id '{doc_id}' belonged to a document that was deleted; "
            "ids are never reused, so choose another one."
        )
    raise PreconditionFailed(
        f"The id '{doc_id}' is already in use in {resource.resource_id}; choose another one."
    )
