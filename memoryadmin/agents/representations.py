"""The public JSON shapes of sessions and their events."""

from __future__ import annotations

from typing import Any

from memoryadmin.agents.bindings import sessions_memory
from memoryadmin.agents.models import Session, SessionEvent
from memoryadmin.memory.representations import iso_ms


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
