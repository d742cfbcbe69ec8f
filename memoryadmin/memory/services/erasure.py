"""What an erasure removes from this app's tables: documents, versions, proposals, audit
details and the search index (memoryadmin/erasures runs the whole erasure).

An exact text is replaced by the marker in every live document that holds it
(title, summary or text), as an owner write of its own (`erase`), and every
version that held it is redacted whole (redaction.versions_redact, which also
takes it out of the recalls that showed those versions and the proposals
that wrote them). Named documents are deleted (their id stays reserved) and
every version redacted. Proposals and audit details keep the rest of what
they say: only the text is replaced (core/erasing.rows_erase). On SQLite the
full-text index is merged, so no segment keeps a rewritten row's old terms.

Each function counts first and changes only with `apply`, in the caller's
transaction: a dry run and the erasure it previews count the same copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from django.db.models import QuerySet

from memoryadmin.core.erasing import MARKER, containing, rows_erase
from memoryadmin.memory.models import (
    AuditEntry,
    Document,
    DocumentVersion,
    Proposal,
    Resource,
)
from memoryadmin.memory.services.documents import document_delete, document_erase_text
from memoryadmin.memory.services.redaction import search_index_merge, versions_redact

# A named document's texts shorter than this are not searched for elsewhere (audit,
# recalls, payloads): a short text is more likely someone else's words too.
NEEDLE_MIN_CHARS = 8


@dataclass
class MemoryErasure:
    """Counts by place, and the texts the other apps are to look for."""

    counts: dict[str, int] = field(default_factory=dict)
    needles: list[str] = field(default_factory=list)


def _holds(value: str, needles: Sequence[str]) -> bool:
    return any(needle in value for needle in needles)


def _of_environment(rows: QuerySet, prefix: str, project_id: str, environment: str) -> QuerySet:
    return rows.filter(**{f"{prefix}project_id": project_id, f"{prefix}environment": environment})


def memory_erase_text(
    *,
    project_id: str,
    environment: str,
    needles: Sequence[str],
    reason: str,
    actor: str,
    apply: bool,
) -> dict[str, int]:
    """Documents, versions, proposals and the search index holding any of `needles`."""
    documents = [
        document
        for document in containing(
            _of_environment(
                Document.objects.live().select_related("resource"),
                "resource__",
                project_id,
                environment,
            ),
            needles,
            text=("title", "summary", "text"),
        )
        if _holds(f"{document.title}\n{document.summary}\n{document.text}", needles)
    ]
    versions = [
        version
        for version in containing(
            _of_environment(
                DocumentVersion.objects.filter(redacted_at__isnull=True).select_related(
                    "document__resource"
                ),
                "document__resource__",
                project_id,
                environment,
            ),
            needles,
            text=("title", "summary", "text"),
        )
        if _holds(f"{version.title}\n{version.summary}\n{version.text}", needles)
    ]
    # Proposals hold their texts apart from the documents and versions changed below.
    proposals = rows_erase(
        _of_environment(Proposal.objects.all(), "document__resource__", project_id, environment),
        needles,
        text=("text", "summary"),
        apply=apply,
    )
    counts = {
        "documents": len(documents),
        "versions": len(versions),
        "proposals": proposals,
        "searchIndex": len(documents),
    }
    if not apply:
        return counts
    for document in documents:
        document_erase_text(document=document, needles=needles, actor=actor)
    by_document: dict[int, tuple[Resource, Document, list[str]]] = {}
    for version in versions:
        entry = by_document.setdefault(
            version.document_id, (version.document.resource, version.document, [])
        )
        entry[2].append(version.revision)
    for resource, document, revisions in by_document.values():
        # Recalls, audit details and proposals holding the text are the caller's next
        # passes, by the text: one query each instead of one per version.
        versions_redact(
            resource=resource,
            document=document,
            revisions=revisions,
            reason=reason,
            actor=actor,
            copies=False,
        )
    search_index_merge()
    return counts


def memory_erase_documents(
    *, documents: Sequence[Document], reason: str, actor: str, apply: bool
) -> MemoryErasure:
    """Named documents erased whole: deleted (a tombstone keeps the id), every version
    redacted, their proposals' texts replaced. Their texts are the needles of the rest."""
    result = MemoryErasure()
    # As they are now: an erasure counts, then changes them in a later transaction.
    documents = list(
        Document.objects.select_related("resource").filter(pk__in=[d.pk for d in documents])
    )
    versions = DocumentVersion.objects.filter(document__in=documents)
    texts = {document.text for document in documents}
    texts |= set(versions.values_list("text", flat=True))
    result.needles = sorted(
        (text for text in texts if len(text) >= NEEDLE_MIN_CHARS and text != MARKER),
        key=lambda text: (-len(text), text),
    )
    live = [document for document in documents if not document.deleted]
    proposals = Proposal.objects.filter(document__in=documents).exclude(text=MARKER)
    result.counts = {
        "documents": len(live),
        "versions": versions.filter(redacted_at__isnull=True).count(),
        "proposals": proposals.count(),
        "searchIndex": len(live),
    }
    if not apply:
        return result
    for document in live:
        document_delete(
            resource=document.resource,
            doc_id=document.doc_id,
            expected_revision=document.revision,
            actor=actor,
        )
    for document in documents:
        revisions = list(
            DocumentVersion.objects.filter(document=document).values_list("revision", flat=True)
        )
        versions_redact(
            resource=document.resource,
            document=document,
            revisions=revisions,
            reason=reason,
            actor=actor,
        )
    proposals.update(text=MARKER, summary=None)
    search_index_merge()
    return result


def audit_erase(*, project_id: str, environment: str, needles: Sequence[str], apply: bool) -> int:
    """Audit entries whose details hold any of `needles`: the text replaced in them."""
    return rows_erase(
        AuditEntry.objects.filter(project_id=project_id, environment=environment),
        needles,
        json_=("detail",),
        apply=apply,
    )
