"""Redaction: an old version's title, summary and text replaced for good by a marker.

The version keeps its metadata (writer, time, revision, action, size before);
the audit log gets the reason. Every other copy the server keeps goes in the
same transaction: titles in the audit details of that revision, the approved
proposal that wrote it, the copies other apps keep (each registered from its
`ready()` with core.erasing's `copies_register`, as for an erasure: the recalls
that showed that revision to a model, the merges of incidents' containment
reports made from it, the uploads waiting for their import that hold it), and
the search index (on SQLite, FTS5 keeps deleted terms in its segments until
they are merged, so the index is merged at once).
"""

from __future__ import annotations

from django.db import connection, transaction
from django.utils import timezone

from memoryadmin.core.erasing import MARKER, RedactedVersion, copies_registered
from memoryadmin.core.errors import Conflict, InvalidRequest, NotFound
from memoryadmin.core.rows import database_vendor
from memoryadmin.core.strings import string_check
from memoryadmin.memory.models import AuditEntry, Document, DocumentVersion, Proposal, Resource
from memoryadmin.memory.services.audit import audit_record
from memoryadmin.memory.services.documents import document_get
from memoryadmin.memory.services.projects import erasure_epoch_advance

REDACTED = MARKER
REASON_MAX_CHARS = 500


def check_reason(reason: object, *, what: str = "redaction") -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidRequest(f"A{'n' if what[0] in 'aeiou' else ''} {what} needs a reason.")
    if len(reason) > REASON_MAX_CHARS:
        raise InvalidRequest(f"The reason is at most {REASON_MAX_CHARS} characters.")
    # Kept in the audit log (and a receipt): whichever door passed it on unchecked.
    return string_check(reason, field="reason")


def _refusal(document: Document, version: DocumentVersion) -> str | None:
    if version.redacted_at is not None:
        return f"Version {version.revision} is already redacted."
    if version.revision == document.revision:
        return (
            "The current version cannot be redacted: edit the document first, "
            "then redact this version."
        )
    return None


@transaction.atomic
def version_redact(
    *, resource: Resource, doc_id: str, revision: str, reason: str, actor: str
) -> DocumentVersion:
    """Redacts one old version of a live document; 409 for the current or a redacted one.

    Only this version: another version with the same content keeps it (the
    current one included), as the history says.
    """
    reason = check_reason(reason)
    found = document_get(resource=resource, doc_id=doc_id)
    # As an erasure: a recall that read this version while it was current and stores after
    # the redaction commits stores nothing and recalls again.
    erasure_epoch_advance(project_id=resource.project_id)
    # Locked: no write may make this version current while it is redacted.
    document = Document.objects.select_for_update().get(pk=found.pk)
    version = DocumentVersion.objects.filter(document=document, revision=revision).first()
    if version is None:
        raise NotFound(f"Document '{doc_id}' has no version '{revision}'.")
    refusal = _refusal(document, version)
    if refusal is not None:
        raise Conflict(refusal)
    secrets = [value for value in (version.title, version.summary, version.text) if value]
    versions_redact(
        resource=resource, document=document, revisions=[revision], reason=reason, actor=actor
    )
    search_index_merge()
    audit_record(
        project_id=resource.project_id,
        environment=resource.environment,
        actor=actor,
        action="version.redact",
        resource_id=resource.resource_id,
        document_id=doc_id,
        revision=revision,
        detail={"reason": reason, "bytes": version.bytes, "fields": len(secrets)},
    )
    version.refresh_from_db()
    return version


def versions_redact(
    *,
    resource: Resource,
    document: Document,
    revisions: list[str],
    reason: str,
    actor: str,
    copies: bool = True,
) -> int:
    """Redacts these versions of a document (the current one too: an erasure has
    rewritten the document first), with every copy the server keeps of them (the
    copies the apps registered too) but the search index (`search_index_merge`, once
    per transaction); returns how many were not redacted yet. The caller audits.
    Without `copies`, the copies elsewhere are left to the caller (an erasure of a text
    finds them by the text, in one pass)."""
    versions = DocumentVersion.objects.filter(
        document=document, revision__in=revisions, redacted_at__isnull=True
    )
    changed = versions.update(
        title=REDACTED,
        summary=REDACTED,
        text=REDACTED,
        redacted_at=timezone.now(),
        redacted_by=actor,
        redaction_reason=reason,
    )
    if not copies:
        return changed
    for revision in revisions:
        _scrub_audit(resource, document.doc_id, revision)
        # The approved proposal that wrote this version holds its text too.
        Proposal.objects.filter(document=document, applied_revision=revision).update(
            text=REDACTED, summary=None
        )
        version = RedactedVersion(
            project_id=resource.project_id,
            environment=resource.environment,
            resource_key=resource.pk,
            resource_id=resource.resource_id,
            doc_id=document.doc_id,
            revision=revision,
        )
        for registered in copies_registered():
            if registered.redact is not None:
                registered.redact(version=version, marker=REDACTED)
    return changed


def _scrub_audit(resource: Resource, doc_id: str, revision: str) -> None:
    """A patch's audit entry names the title it set: that title goes too."""
    entries = AuditEntry.objects.filter(
        project_id=resource.project_id,
        environment=resource.environment,
        resource_id=resource.resource_id,
        document_id=doc_id,
        revision=revision,
    )
    for entry in entries:
        if "title" in entry.detail:
            AuditEntry.objects.filter(pk=entry.pk).update(
                detail={**entry.detail, "title": REDACTED}
            )


def search_index_merge() -> None:
    """Merges SQLite's full-text index, whose segments keep a rewritten row's old terms
    until they are merged."""
    if database_vendor() != "sqlite":
        return  # PostgreSQL's index is a column of the live row: old text is not in it.
    with connection.cursor() as cursor:
        for table in ("memory_document_fts", "memory_document_trigram"):
            cursor.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")
