"""The overview page: the environment at a glance, in charts drawn on the server."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponseBase
from django.views.decorators.http import require_GET

from memoryadmin.web.services.overview import WIDTH, WRITER_NAMES, overview_get
from memoryadmin.web.services.roles import READ
from memoryadmin.web.views.base import Page, page_render, project_view


@require_GET
@project_view(READ)
def overview(request: HttpRequest, page: Page) -> HttpResponseBase:
    context = {
        "overview": overview_get(project=page.project, environment=page.environment),
        "writer_names": WRITER_NAMES,
        "session_names": {"sessions": "sessions created", "failures": "recall failures"},
        "chart_width": WIDTH,
    }
    return page_render(request, "memoryadmin/overview.html", page, context)
