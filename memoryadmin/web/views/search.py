"""The search page: every document resource of the environment, hits grouped by resource."""

from __future__ import annotations

from itertools import groupby
from typing import Any

from django.http import HttpRequest, HttpResponseBase
from django.views.decorators.http import require_GET

from memoryadmin.core.errors import InvalidRequest
from memoryadmin.memory.services.search import document_resources, document_search
from memoryadmin.web.services.roles import READ
from memoryadmin.web.views.base import Page, page_render, project_view


@require_GET
@project_view(READ)
def search(request: HttpRequest, page: Page) -> HttpResponseBase:
    q = request.GET.get("q", "").strip()
    cursor = request.GET.get("cursor") or None
    context: dict[str, Any] = {"search_q": q, "groups": [], "next_cursor": None, "cursor": cursor}
    status = 200
    if q:
        try:
            hits, context["next_cursor"] = document_search(
                resources=document_resources(project=page.project, environment=page.environment),
                q=q,
                cursor=cursor,
                scope=f"{page.project.id}:{page.environment}",
            )
        except InvalidRequest as exc:
            context["error"] = exc.message
            status = 422
        else:
            # Ranked hits, grouped by resource in the order each resource first ranks.
            order = {h["resource"]: i for i, h in reversed(list(enumerate(hits)))}
            hits.sort(key=lambda h: order[h["resource"]])
            context["groups"] = [
                (resource, list(group))
                for resource, group in groupby(hits, lambda h: h["resource"])
            ]
    return page_render(request, "memoryadmin/search.html", page, context, status=status)
