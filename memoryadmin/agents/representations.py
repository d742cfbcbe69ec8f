"""The public JSON shapes of sessions, their events, and documents as the model sees them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memoryadmin.agents.bindings import sessions_memory
from memoryadmin.agents.models import Recall, Session, SessionEvent
from memoryadmin.memory.models import Document
from memoryadmin.memory.representations import document_dict, iso_ms


def session_dict(session: Session, *, memory: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": session.id,
        "projectId": session.project_id,
        "agentId": f"{session.agent}@{session.environment}",
        "agent": session.agent,
        "environment": session.environment,
        "deploymentId": session.deployment_id,
        "status": session.status,
        "labels": session.labels,
        "memory": memory,
        "createdAt": iso_ms(session.created_at),
        "endedAt": iso_ms(session.ended_at) if session.ended_at else None,
    }


def sessions_dicts(sessions: list[Session]) -> list[dict[str, Any]]:
    """Sessions with their live memory arrays, in a fixed number of queries."""
    memory = sessions_memory(sessions)
    return [session_dict(session, memory=memory[session.id]) for session in sessions]


def event_dict(event: SessionEvent) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "type": event.type,
        "createdAt": iso_ms(event.created_at),
        "data": event.data,
    }


def recall_record_dict(recall: Recall) -> dict[str, Any]:
    """A recall as it was given to the model."""
    return {
        "id": recall.id,
        "createdAt": iso_ms(recall.created_at),
        "use": recall.use,
        "memory": recall.memory,
    }


def reader_dict(recall: Recall) -> dict[str, Any]:
    """A recall that showed a version to a model: which session, agent and when."""
    return {
        "recallId": recall.id,
        "sessionId": recall.session_id,
        "agent": recall.session.agent,
        "createdAt": iso_ms(recall.created_at),
    }


# Documents as the model sees them: parts of the document object, by key.
SOURCE_KEYS = ("id", "title", "revision", "updatedAt")
TOOL_DOCUMENT_KEYS = ("id", "title", "text", "summary", "revision", "updatedAt")


def _document_part(
    document: Document | Mapping[str, Any], keys: tuple[str, ...], *, include_text: bool = False
) -> dict[str, Any]:
    whole = document_dict(document, max_bytes=0, include_text=include_text)
    return {key: whole[key] for key in keys if key in whole}


def source_dict(document: Document | Mapping[str, Any]) -> dict[str, Any]:
    """A document a recall drew on."""
    return _document_part(document, SOURCE_KEYS)


def tool_document_dict(
    document: Document | Mapping[str, Any], *, include_text: bool
) -> dict[str, Any]:
    """A document as the memory_read tool (with text) and memory_list (without) return it."""
    return _document_part(document, TOOL_DOCUMENT_KEYS, include_text=include_text)
