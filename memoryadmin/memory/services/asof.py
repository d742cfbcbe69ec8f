"""A resource as it was at a moment T, read from the version history, and restoring
documents (or the whole resource) to T as new conditional versions.

Each document that existed at T shows the newest version written at or before T.
A document deleted after T is listed as deleted: its id stays reserved and its
content is gone (deletion wipes the versions too). A document deleted before T
did not exist at T and is left out, as is one created after T.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import OuterRef, Q, Subquery
from django.utils import timezone

from memoryadmin.core.cursors import keyset_page
from memoryadmin.core.errors import Conflict, InvalidRequest, NotFound, PreconditionFailed
from memoryadmin.core.inputs import parse_instant
from memoryadmin.core.strings import strings_check
from memoryadmin.memory.limits import LIST_PAGE_SIZE
from memoryadmin.memory.models import Document, DocumentVersion, Resource
from memoryadmin.memory.representations import iso_ms, writer_dict
from memoryadmin.memory.services.audit import audit_record
from memoryadmin.memory.services.documents import document_restore, documents_seen

RESTORE = "restore"
UNCHANGED = "unchanged"
DELETED = "deleted"
CREATED_SINCE = "created_since"
CONFLICT = "conflict"
ABSENT = "absent"
# The version at T was redacted: nothing to return to (a restore never makes a redacted
# version current), as a session revert says of its own.
REDACTED = "redacted"


def parse_as_of(value: object) -> datetime:
    """An ISO 8601 time with a zone (or Z); a time without one is taken as UTC."""
    return parse_instant(value, field="asOf")


def _existing_at(resource: Resource, as_of: datetime) -> Any:
    """Documents that existed at T, each with the id of its version at T."""
    at_t = DocumentVersion.objects.filter(document=OuterRef("pk"), created_at__lte=as_of)
    return (
        Document.objects.filter(resource=resource, created_at__lte=as_of)
        .exclude(Q(deleted=True) & Q(updated_at__lte=as_of))
        .annotate(version_at=Subquery(at_t.order_by("-id").values("id")[:1]))
        .filter(version_at__isnull=False)
    )


@dataclass(frozen=True)
class AsOfEntry:
    document: Document
    version: DocumentVersion

    @property
    def changed_since(self) -> bool:
        return self.document.deleted or self.document.revision != self.version.revision

    def as_dict(self, *, max_bytes: int) -> dict[str, Any]:
        v = self.version
        return {
            "id": self.document.doc_id,
            "title": v.title,
            "summary": v.summary,
            "agentWrites": "enabled" if v.agent_writes else "disabled",
            "revision": v.revision,
            "bytes": v.bytes,
            "maxBytes": max_bytes,
            "updatedAt": iso_ms(v.created_at),
            "writer": writer_dict(v.writer_kind, v.writer_session_id),
            "deleted": self.document.deleted,
            "currentRevision": None if self.document.deleted else self.document.revision,
        }


def document_list_as_of(
    *, resource: Resource, as_of: datetime, cursor: str | None = None, limit: int = LIST_PAGE_SIZE
) -> tuple[list[AsOfEntry], str | None]:
    """One page of the resource as it was at `as_of`, by document id."""
    documents, next_cursor = keyset_page(
        _existing_at(resource, as_of),
        order=("doc_id",),
        cursor=cursor,
        scope=f"asof:{resource.pk}:{as_of.isoformat()}",
        limit=limit,
    )
    versions = DocumentVersion.objects.in_bulk([d.version_at for d in documents])
    return [AsOfEntry(d, versions[d.version_at]) for d in documents], next_cursor


@dataclass
class AsOfRestoreItem:
    doc_id: str
    action: str
    restore_revision: str | None = None
    current_revision: str | None = None
    revision: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "documentId": self.doc_id,
            "action": self.action,
            "restoreRevision": self.restore_revision,
            "currentRevision": self.current_revision,
            "revision": self.revision,
        }


@dataclass
class AsOfRestorePlan:
    as_of: datetime
    dry_run: bool
    items: list[AsOfRestoreItem] = field(default_factory=list)

    @property
    def seen(self) -> str:
        """What the plan shows (each document, its action and current revision), for a
        form to send back with the restore it asks for."""
        return documents_seen(
            (item.doc_id, item.action, item.current_revision or "") for item in self.items
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "asOf": iso_ms(self.as_of),
            "dryRun": self.dry_run,
            "documents": [item.as_dict() for item in self.items],
        }


def _plan(resource: Resource, as_of: datetime, doc_ids: list[str] | None) -> AsOfRestorePlan:
    plan = AsOfRestorePlan(as_of=as_of, dry_run=True)
    then = {d.doc_id: d for d in _existing_at(resource, as_of)}
    versions = DocumentVersion.objects.in_bulk([d.version_at for d in then.values()])
    wanted = sorted(set(doc_ids)) if doc_ids is not None else None
    current = Document.objects.filter(resource=resource)
    if wanted is not None:
        current = current.filter(doc_id__in=wanted)
    now = {d.doc_id: d for d in current}
    for doc_id in wanted if wanted is not None else sorted(set(then) | set(now)):
        document = now.get(doc_id)
        if document is None or (doc_id not in then and document.deleted):
            plan.items.append(AsOfRestoreItem(doc_id, ABSENT))
            continue
        if doc_id not in then:
            plan.items.append(AsOfRestoreItem(doc_id, CREATED_SINCE, None, document.revision))
            continue
        version = versions[then[doc_id].version_at]
        if document.deleted:
            # Never a resurrection: a deleted id stays reserved.
            plan.items.append(AsOfRestoreItem(doc_id, DELETED, version.revision))
            continue
        if version.redacted_at is not None:
            plan.items.append(
                AsOfRestoreItem(doc_id, REDACTED, version.revision, document.revision)
            )
            continue
        same = (document.text, document.summary) == (version.text, version.summary)
        action = UNCHANGED if same else RESTORE
        plan.items.append(AsOfRestoreItem(doc_id, action, version.revision, document.revision))
    return plan


def resource_restore_as_of(
    *,
    resource: Resource,
    as_of: datetime,
    doc_ids: list[str] | None,
    dry_run: bool,
    actor: str,
    seen: str | None = None,
) -> AsOfRestorePlan:
    """Makes each chosen document's text and summary at T current again, through the one
    restore rule, over the revision the plan read (a write meanwhile: conflict).

    `seen`, a plan's `seen` that a person was shown: a plan that reads otherwise now (a
    document written, come or gone since) restores nothing (412), so a write the person
    never saw is not restored over."""
    if as_of > timezone.now():
        raise InvalidRequest("asOf is in the future; nothing was written after now.")
    # The ids are looked up: one the database cannot take (NUL, a lone surrogate) is refused
    # here, whichever door passed it on (the page's form, the CLI's arguments).
    strings_check(doc_ids, field="documents")
    plan = _plan(resource, as_of, doc_ids)
    if dry_run:
        return plan
    if seen is not None and seen != plan.seen:
        raise PreconditionFailed(
            "The documents changed since the plan was shown; nothing was restored.",
            details={"plan": plan.as_dict()},
        )
    plan.dry_run = False
    for item in plan.items:
        if item.action != RESTORE or item.restore_revision is None:
            continue
        try:
            document = Document.objects.get(resource=resource, doc_id=item.doc_id)
            restored = document_restore(
                resource=resource,
                doc_id=document.doc_id,
                revision=item.restore_revision,
                expected_revision=item.current_revision or "",
                actor=actor,
            )
        except (PreconditionFailed, NotFound, Conflict):
            item.action = CONFLICT
            continue
        item.revision = restored.revision
    audit_record(
        project_id=resource.project_id,
        environment=resource.environment,
        actor=actor,
        action="resource.restore_as_of",
        resource_id=resource.resource_id,
        detail={
            "asOf": iso_ms(as_of),
            "restored": [i.doc_id for i in plan.items if i.action == RESTORE],
            "conflicts": [i.doc_id for i in plan.items if i.action == CONFLICT],
        },
    )
    return plan
