"""The public JSON shapes of memory objects, shared by the API, CLI and exports."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import lru_cache, partial
from operator import itemgetter
from typing import Any

from memoryadmin.memory.limits import agent_writes_shown
from memoryadmin.memory.models import (
    ApiKey,
    AuditEntry,
    Deployment,
    Document,
    DocumentVersion,
    Project,
    Proposal,
    Resource,
)
from memoryadmin.memory.services.deployments import declarations_public, deployment_active_in
from memoryadmin.memory.services.documents import LIST_FIELDS


@lru_cache(maxsize=4096)
def iso_ms(value: datetime) -> str:
    """UTC, to the millisecond (truncated): 2026-09-10T12:00:00.123Z. Remembered per
    process (equal instants give the same text): lists, recalls and GETs show the same
    documents' times again and again, and formatting one costs about 0.8 us (a list's
    page of 50: 4 % of it), a remembered one 0.07."""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def writer_dict(kind: str, session_id: str) -> dict[str, Any]:
    if kind == "agent":
        return {"kind": "agent", "sessionId": session_id}
    return {"kind": "owner"}


# A document object's fields with its text, as `.values_list(*DOCUMENT_FIELDS)` reads
# them for `document_of_values` (a list entry's fields are LIST_FIELDS, without text).
DOCUMENT_FIELDS = (*LIST_FIELDS, "text")
_AT = {name: index for index, name in enumerate(DOCUMENT_FIELDS)}
_ID, _TITLE, _TEXT, _SUMMARY = _AT["doc_id"], _AT["title"], _AT["text"], _AT["summary"]
_WRITES, _REVIEW, _REVISION = _AT["agent_writes"], _AT["agent_review"], _AT["revision"]
_BYTES, _UPDATED, _KIND, _SESSION = (
    _AT["bytes"], _AT["updated_at"], _AT["writer_kind"], _AT["writer_session_id"]
)  # fmt: skip


def document_dict(
    document: Document | Mapping[str, Any],
    *,
    max_bytes: int,
    include_text: bool = True,
    review_default: bool = False,
) -> dict[str, Any]:
    """The document object; a list entry (`include_text=False`) leaves out its text, so
    a `.values()` row of the list fields will do."""
    # Lists and exports call this per row: one type test, not one per field.
    get: Callable[[str], Any] = (
        document.__getitem__ if isinstance(document, Mapping) else partial(getattr, document)
    )
    values = [get(name) for name in (DOCUMENT_FIELDS if include_text else LIST_FIELDS)]
    return _document_object(values, max_bytes, review_default)


def document_of_values(
    values: Sequence[Any], *, max_bytes: int, review_default: bool
) -> dict[str, Any]:
    """The document object of a `.values_list(*DOCUMENT_FIELDS)` row: what an export
    makes of each row, with no mapping or instance per row."""
    return _document_object(values, max_bytes, review_default)


def _document_object(values: Sequence[Any], max_bytes: int, review_default: bool) -> dict[str, Any]:
    data: dict[str, Any] = {"id": values[_ID], "title": values[_TITLE]}
    if len(values) > _TEXT:  # the text comes last: a list entry's row has none
        data["text"] = values[_TEXT]
    data["summary"] = values[_SUMMARY]
    data["agentWrites"] = agent_writes_shown(
        agent_writes=values[_WRITES], agent_review=values[_REVIEW], default=review_default
    )
    data["revision"] = values[_REVISION]
    data["bytes"] = values[_BYTES]
    data["maxBytes"] = max_bytes
    data["updatedAt"] = iso_ms(values[_UPDATED])
    data["writer"] = writer_dict(values[_KIND], values[_SESSION])
    return data


# A list row's values in LIST_FIELDS order, in one call (a page has fifty rows).
_LIST_VALUES = itemgetter(*LIST_FIELDS)


def document_entries(rows: Sequence[Mapping[str, Any]], resource: Resource) -> list[dict[str, Any]]:
    """List entries (no text) of `.values()` rows of one resource: `document_dict`'s
    objects, the resource's limit and review default read once for the page."""
    max_bytes, review_default = resource.max_bytes, resource.review_default
    return [_document_object(_LIST_VALUES(row), max_bytes, review_default) for row in rows]


def search_hit_dict(
    row: Mapping[str, Any], *, resource: Resource, with_resource: bool = False
) -> dict[str, Any]:
    """A list entry of `resource`; a search hit (a row with a `snippet`) adds its
    snippet, and its resource id when the search spans resources."""
    data = document_dict(
        row,
        max_bytes=resource.max_bytes,
        include_text=False,
        review_default=resource.review_default,
    )
    if with_resource:
        data = {"resource": row["resource"], **data}
    if "snippet" in row:
        data["snippet"] = row["snippet"]
    return data


def version_dict(version: DocumentVersion, *, include_text: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "revision": version.revision,
        "writer": writer_dict(version.writer_kind, version.writer_session_id),
        "origin": version.origin,
        "bytes": version.bytes,
        "title": version.title,
        "summary": version.summary,
        "agentWrites": "enabled" if version.agent_writes else "disabled",
        "action": version.action,
        "createdAt": iso_ms(version.created_at),
        "redacted": None,
    }
    if version.redacted_at is not None:
        data["redacted"] = {
            "at": iso_ms(version.redacted_at),
            "by": version.redacted_by,
            "reason": version.redaction_reason,
        }
    if include_text:
        data["text"] = version.text
    return data


def proposal_dict(proposal: Proposal, *, now: datetime) -> dict[str, Any]:
    document = proposal.document
    return {
        "id": proposal.id,
        "resource": document.resource.resource_id,
        "documentId": document.doc_id,
        "state": proposal.state_at(now),
        "text": proposal.text,
        "summary": proposal.summary,
        "bytes": proposal.bytes,
        "baseRevision": proposal.base_revision,
        "currentRevision": None if document.deleted else document.revision,
        "sessionId": proposal.session_id,
        "agent": proposal.agent,
        "recallId": proposal.recall_id,
        "callId": proposal.call_id,
        "createdAt": iso_ms(proposal.created_at),
        "expiresAt": iso_ms(proposal.expires_at),
        "decidedAt": iso_ms(proposal.decided_at) if proposal.decided_at else None,
        "decidedBy": proposal.decided_by,
        "reason": proposal.reason,
        "appliedRevision": proposal.applied_revision or None,
    }


def audit_dict(entry: AuditEntry) -> dict[str, Any]:
    return {
        "id": entry.pk,
        "createdAt": iso_ms(entry.created_at),
        "actor": entry.actor,
        "action": entry.action,
        "environment": entry.environment or None,
        "resource": entry.resource_id or None,
        "document": entry.document_id or None,
        "revision": entry.revision or None,
        "detail": entry.detail,
    }


def project_dict(project: Project) -> dict[str, Any]:
    return {"id": project.id, "name": project.name, "createdAt": iso_ms(project.created_at)}


def deployments_dicts(deployments: list[Deployment]) -> list[dict[str, Any]]:
    """Deployments with the environments each is active in, in one query."""
    active = deployment_active_in(deployments=deployments)
    return [deployment_dict(d, active_in=active[d.id]) for d in deployments]


def deployment_dict(deployment: Deployment, *, active_in: list[str]) -> dict[str, Any]:
    return {
        "id": deployment.id,
        "projectId": deployment.project_id,
        "agent": deployment.agent,
        "memory": declarations_public(deployment.memory),
        "activeIn": active_in,
        "createdAt": iso_ms(deployment.created_at),
    }


def api_key_dict(key: ApiKey) -> dict[str, Any]:
    """A key as every door shows it: never its secret or its hash."""
    return {
        "id": key.pk,
        "name": key.name,
        "prefix": key.prefix,
        "scope": key.project_id or "*",
        "readOnly": key.read_only,
        "createdAt": iso_ms(key.created_at),
        "lastUsedAt": iso_ms(key.last_used_at) if key.last_used_at else None,
        "revokedAt": iso_ms(key.revoked_at) if key.revoked_at else None,
    }
