"""What the agent sees: for an agent of this environment and a choice of bindings, the
recall a new session would get (agents/services/preview.py: the runtime, rolled back)."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponseBase
from django.views.decorators.http import require_GET

from memoryadmin.agents.services.preview import recall_preview
from memoryadmin.core.errors import DomainError, InvalidRequest
from memoryadmin.web.services.roles import READ
from memoryadmin.web.services.sessions import session_agents
from memoryadmin.web.views.base import Page, actor, page_render, project_view

BINDINGS_MAX_CHARS = 8192
EXAMPLE = '{"notes": {"scope": "document", "id": "workshop", "access": "read-write"}}'


@require_GET
@project_view(READ)
def agent_preview(request: HttpRequest, page: Page) -> HttpResponseBase:
    agents = session_agents(project=page.project)
    agent = request.GET.get("agent", "")
    raw = request.GET.get("memory", "")
    context: dict[str, Any] = {"agents": agents, "agent": agent, "memory": raw or EXAMPLE}
    if agent:
        try:
            if len(raw) > BINDINGS_MAX_CHARS:
                raise InvalidRequest(f"The bindings are over {BINDINGS_MAX_CHARS} characters.")
            try:
                memory = json.loads(raw or "{}")
            except ValueError as exc:
                raise InvalidRequest(f"The bindings are not JSON: {exc}.") from exc
            context["preview"] = recall_preview(
                project=page.project,
                agent_id=f"{agent}@{page.environment}",
                memory=memory,
                actor=actor(request),
            )
        except DomainError as exc:
            context["error"] = exc.message
    return page_render(request, "memoryadmin/agent_preview.html", page, context)
