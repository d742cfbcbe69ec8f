"""Actions on several documents at once: each document still goes through its own service
call, with its own revision check and audit entry, and a failure stops only that one."""

from __future__ import annotations

from dataclasses import dataclass, field

from memoryadmin.core.errors import DomainError, InvalidRequest, PreconditionFailed
from memoryadmin.core.strings import strings_check
from memoryadmin.memory.limits import check_document_id
from memoryadmin.memory.models import Resource
from memoryadmin.memory.services.document_filters import DocumentFacets
from memoryadmin.memory.services.documents import (
    document_delete,
    document_set_agent_writes,
    documents_matching,
    documents_seen,
)

BULK_MAX = 100
# "Select all matching": at most this many documents per action (each is its own write
# and audit entry, in this request).
BULK_MATCHING_MAX = 1000
BULK_ACTIONS = {"freeze": "Freeze", "unfreeze": "Unfreeze", "delete": "Delete", "export": "Export"}
# Actions that change nothing: no confirmation, no revision check.
BULK_READS = frozenset({"export"})


@dataclass(frozen=True)
class Selected:
    doc_id: str
    revision: str  # the revision the list showed: a delete refuses a changed document


@dataclass
class BulkResult:
    done: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (id, why)


def bulk_selection(values: list[str]) -> list[Selected]:
    """Parses the list's checkboxes ("<id>:<revision>"), refusing a malformed or oversized
    selection as a whole."""
    if not values:
        raise InvalidRequest("Select at least one document.")
    if len(values) > BULK_MAX:
        raise InvalidRequest(f"Select at most {BULK_MAX} documents at once, not {len(values)}.")
    # The revisions too: a delete compares each in a query, which PostgreSQL cannot run
    # with a NUL, after the documents before it were deleted.
    strings_check(values, field="doc")
    selected: dict[str, Selected] = {}
    for value in values:
        doc_id, _, revision = value.partition(":")
        check_document_id(doc_id)
        selected.setdefault(doc_id, Selected(doc_id=doc_id, revision=revision))
    return list(selected.values())


def bulk_matching(*, resource: Resource, query: str, facets: DocumentFacets) -> list[Selected]:
    """Every live document the list's filter and facets keep (by id), read now on the
    server, refusing more than BULK_MATCHING_MAX or none as a whole."""
    rows = list(
        documents_matching(resource=resource, query=query, facets=facets)
        .order_by("doc_id")
        .values_list("doc_id", "revision")[: BULK_MATCHING_MAX + 1]
    )
    if not rows:
        raise InvalidRequest("No document matches the filters.")
    if len(rows) > BULK_MATCHING_MAX:
        raise InvalidRequest(
            f"More than {BULK_MATCHING_MAX} documents match: an action takes at most "
            f"{BULK_MATCHING_MAX} at once. Narrow the filters and repeat it."
        )
    return [Selected(doc_id=doc_id, revision=revision) for doc_id, revision in rows]


def bulk_seen(action: str, selected: list[Selected]) -> str:
    """What a confirmation of "all matching" named, which its form sends back: the ids,
    and for a delete their revisions too (a delete refuses a document changed since it
    was shown; a freeze needs no revision)."""
    if action == "delete":
        return documents_seen((item.doc_id, item.revision) for item in selected)
    return documents_seen((item.doc_id,) for item in selected)


def documents_bulk(
    *, resource: Resource, action: str, selected: list[Selected], actor: str
) -> BulkResult:
    if action not in BULK_ACTIONS or action in BULK_READS:
        raise InvalidRequest(f"action must be one of: freeze, unfreeze, delete, not {action!r}.")
    result = BulkResult()
    for item in selected:
        try:
            if action == "delete":
                document_delete(
                    resource=resource,
                    doc_id=item.doc_id,
                    expected_revision=item.revision,
                    actor=actor,
                )
                changed = True
            else:
                _, changed = document_set_agent_writes(
                    resource=resource,
                    doc_id=item.doc_id,
                    enabled=action == "unfreeze",
                    actor=actor,
                )
        except PreconditionFailed:
            result.failed.append((item.doc_id, "it changed after you selected it"))
        except DomainError as exc:
            result.failed.append((item.doc_id, exc.message))
        else:
            (result.done if changed else result.unchanged).append(item.doc_id)
    return result
