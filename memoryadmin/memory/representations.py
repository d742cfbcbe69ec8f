"""The public JSON shapes of memory objects, shared by the API, CLI and exports."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from memoryadmin.memory.models import Deployment, Document, DocumentVersion, Project


def iso_ms(value: datetime) -> str:
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def writer_dict(kind: str, session_id: str) -> dict[str, Any]:
    if kind == "agent":
        return {"kind": "agent", "sessionId": session_id}
    return {"kind": "owner"}


def document_dict(document: Document, *, max_bytes: int) -> dict[str, Any]:
    return {
        "id": document.doc_id,
        "title": document.title,
        "text": document.text,
        "summary": document.summary,
        "agentWrites": "enabled" if document.agent_writes else "disabled",
        "revision": document.revision,
        "bytes": document.bytes,
        "maxBytes": max_bytes,
        "updatedAt": iso_ms(document.updated_at),
        "writer": writer_dict(document.writer_kind, document.writer_session_id),
    }


def document_entry_dict(row: dict[str, Any], *, max_bytes: int) -> dict[str, Any]:
    """A list entry: the document object without its text."""
    return {
        "id": row["doc_id"],
        "title": row["title"],
        "summary": row["summary"],
        "agentWrites": "enabled" if row["agent_writes"] else "disabled",
        "revision": row["revision"],
        "bytes": row["bytes"],
        "maxBytes": max_bytes,
        "updatedAt": iso_ms(row["updated_at"]),
        "writer": writer_dict(row["writer_kind"], row["writer_session_id"]),
    }


def version_dict(version: DocumentVersion, *, include_text: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "revision": version.revision,
        "writer": writer_dict(version.writer_kind, version.writer_session_id),
        "bytes": version.bytes,
        "title": version.title,
        "summary": version.summary,
        "agentWrites": "enabled" if version.agent_writes else "disabled",
        "action": version.action,
        "createdAt": iso_ms(version.created_at),
    }
    if include_text:
        data["text"] = version.text
    return data


def project_dict(project: Project) -> dict[str, Any]:
    return {"id": project.id, "name": project.name, "createdAt": iso_ms(project.created_at)}


def deployment_dict(deployment: Deployment, *, active_in: list[str]) -> dict[str, Any]:
    return {
        "id": deployment.id,
        "projectId": deployment.project_id,
        "agent": deployment.agent,
        "memory": deployment.memory,
        "activeIn": active_in,
        "createdAt": iso_ms(deployment.created_at),
    }
