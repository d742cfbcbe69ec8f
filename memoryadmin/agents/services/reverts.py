"""Undo everything one agent session wrote, without overwriting anybody else.

For each document the session changed, the version before its first write is
restored (through the one restore rule, as a new conditional version) when
nobody else changed the text or summary since that first write. Documents
that others changed are listed with the merge of the undo into the current
text instead. A dry run computes the same plan and writes nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from memoryadmin.agents.models import Session
from memoryadmin.core.diff import text_merge
from memoryadmin.core.errors import Conflict, NotFound, PreconditionFailed
from memoryadmin.core.rows import NotBlank
from memoryadmin.memory.models import Document, DocumentVersion
from memoryadmin.memory.services.audit import audit_record
from memoryadmin.memory.services.documents import document_restore

RESTORE = "restore"
CONFLICT = "conflict"
UNCHANGED = "unchanged"
DELETED = "deleted"
# The version before the first own write was redacted: there is no text to return to.
REDACTED = "redacted"


@dataclass
class RevertItem:
    document: Document
    action: str
    # The version the revert restores (the one before the session's first write).
    restore_revision: str = ""
    merged: str | None = None
    written_revision: str = ""
    before_text: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "resource": self.document.resource.resource_id,
            "documentId": self.document.doc_id,
            "action": self.action,
            "currentRevision": None if self.document.deleted else self.document.revision,
            "restoreRevision": self.restore_revision or None,
            "revision": self.written_revision or None,
            "merged": self.merged,
        }


@dataclass
class RevertPlan:
    session: Session
    dry_run: bool
    items: list[RevertItem] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "sessionId": self.session.id,
            "dryRun": self.dry_run,
            "documents": [item.as_dict() for item in self.items],
        }


def _content(version: DocumentVersion | Document) -> tuple[str, str]:
    return version.text, version.summary


def plan_document(
    document: Document, versions: list[DocumentVersion], own: Callable[[DocumentVersion], bool]
) -> RevertItem:
    """The undo of the versions `own` picks (a session's writes, or an incident's tainted
    ones): `versions` are the document's versions, oldest first, at least one of them own."""
    if document.deleted:
        return RevertItem(document, DELETED)
    first = next(i for i, v in enumerate(versions) if own(v))
    if first == 0:
        return RevertItem(document, UNCHANGED)
    before = versions[first - 1]
    if before.redacted_at is not None:
        return RevertItem(document, REDACTED, restore_revision=before.revision)
    last_own = max(i for i, v in enumerate(versions) if own(v))
    # Somebody else changed the content after the first own write (a freeze or a
    # retitle changes no content and does not count).
    touched = any(
        not own(versions[i]) and _content(versions[i]) != _content(versions[i - 1])
        for i in range(first + 1, len(versions))
    )
    if _content(document) == _content(before):
        return RevertItem(document, UNCHANGED, restore_revision=before.revision)
    if not touched:
        return RevertItem(document, RESTORE, restore_revision=before.revision)
    merged = text_merge(base=versions[last_own].text, mine=before.text, theirs=document.text)
    return RevertItem(
        document, CONFLICT, restore_revision=before.revision, merged=merged, before_text=before.text
    )


def document_versions(document_ids: list[int]) -> dict[int, list[DocumentVersion]]:
    """Every version of these documents, oldest first, by document: one query for a
    whole plan."""
    versions: dict[int, list[DocumentVersion]] = defaultdict(list)
    rows = DocumentVersion.objects.filter(document_id__in=document_ids)
    for version in rows.order_by("document_id", "id"):
        versions[version.document_id].append(version)
    return versions


def session_revert_plan(*, session: Session) -> RevertPlan:
    written = (
        DocumentVersion.objects.filter(
            NotBlank("writer_session_id"),
            writer_session_id=session.id,
            document__resource__project_id=session.project_id,
            document__resource__environment=session.environment,
        )
        .values_list("document_id", flat=True)
        .distinct()
    )
    documents = list(
        Document.objects.select_related("resource")
        .filter(pk__in=list(written))
        .order_by("resource__resource_id", "doc_id")
    )
    versions = document_versions([d.pk for d in documents])
    plan = RevertPlan(session=session, dry_run=True)
    for document in documents:
        plan.items.append(
            plan_document(
                document, versions[document.pk], lambda v: v.writer_session_id == session.id
            )
        )
    return plan


def revert_apply(items: list[RevertItem], *, actor: str) -> None:
    """Writes each planned restore as its own conditional write over the revision the plan
    saw, so a write that lands meanwhile turns that document into a conflict."""
    for item in items:
        if item.action != RESTORE:
            continue
        try:
            restored = document_restore(
                resource=item.document.resource,
                doc_id=item.document.doc_id,
                revision=item.restore_revision,
                expected_revision=item.document.revision,
                actor=actor,
            )
        except (PreconditionFailed, NotFound, Conflict):
            item.action = CONFLICT
            continue
        item.written_revision = restored.revision


def session_revert(*, session: Session, dry_run: bool, actor: str) -> RevertPlan:
    """Applies the plan (revert_apply)."""
    plan = session_revert_plan(session=session)
    if dry_run:
        return plan
    plan.dry_run = False
    revert_apply(plan.items, actor=actor)
    with transaction.atomic():
        audit_record(
            project_id=session.project_id,
            environment=session.environment,
            actor=actor,
            action="session.revert",
            detail={
                "sessionId": session.id,
                "restored": [i.document.doc_id for i in plan.items if i.action == RESTORE],
                "conflicts": [i.document.doc_id for i in plan.items if i.action == CONFLICT],
            },
        )
    return plan
