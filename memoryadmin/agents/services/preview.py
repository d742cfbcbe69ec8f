"""What an agent would see: the recall a new session of an agent's deployment, with the
given bindings, would get now, without creating the session or keeping the recall.

The preview is the runtime itself: `session_create` (the same bindings rules, the same
admission against the deployment) and `recall_create` (the same composition, writability
and providers), in a transaction rolled back at its end. So nothing it wrote stays: no
session, binding, event, recall row or audit entry; only a remote provider has been
called, as a session's first recall would call it.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.db import transaction

from memoryadmin.agents.services.runtime import recall_create
from memoryadmin.agents.services.sessions import session_create
from memoryadmin.memory.models import Project


def recall_preview(
    *, project: Project, agent_id: str, memory: object, actor: str
) -> dict[str, Any]:
    """`{"memory": {resource: {text, sources, writable, bytes, maxBytes}}, "tools": [...]}`
    as a session's first recall would get it; the API's errors for bad bindings."""
    result: dict[str, Any] = {}
    with transaction.atomic():
        session, _ = session_create(
            project=project,
            agent_id=agent_id,
            memory=memory,
            idempotency_key=f"preview-{secrets.token_hex(12)}",
            actor=actor,
        )
        limits = {b.resource.resource_id: b.resource.max_bytes for b in session.bindings.all()}
        # Every binding in use: the tools are those a model request using them all gets.
        recalled = recall_create(session=session, use=list(limits))
        result = {
            "memory": {
                resource: {
                    **shown,
                    "bytes": len(str(shown.get("text") or "").encode()),
                    "maxBytes": limits.get(resource),
                }
                for resource, shown in recalled["memory"].items()
            },
            "tools": [tool.get("name") for tool in recalled["tools"]],
        }
        transaction.set_rollback(True)
    return result
