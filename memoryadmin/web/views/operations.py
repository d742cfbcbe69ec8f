"""Provider operations on the Memory page: retry or discard a dead letter."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from memoryadmin.agents.services.operations import (
    operation_discard,
    operation_get,
    operation_retry,
)
from memoryadmin.web.services.roles import OPERATIONS
from memoryadmin.web.views.base import Page, actor, project_view


@require_POST
@project_view(OPERATIONS)
def retry(request: HttpRequest, page: Page, o: str) -> HttpResponseBase:
    operation = operation_get(project=page.project, environment=page.environment, operation_id=o)
    operation_retry(operation=operation, actor=actor(request))
    messages.success(request, f"{operation.id} is queued again: its provider is asked anew.")
    return _back(request, page)


@require_POST
@project_view(OPERATIONS)
def discard(request: HttpRequest, page: Page, o: str) -> HttpResponseBase:
    operation = operation_get(project=page.project, environment=page.environment, operation_id=o)
    operation_discard(operation=operation, actor=actor(request))
    messages.info(request, f"{operation.id} is discarded; it stays listed.")
    return _back(request, page)


def _back(request: HttpRequest, page: Page) -> HttpResponseBase:
    """To the page the button was on (a path of this site), else the inventory."""
    target = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(target, allowed_hosts=None) and target.startswith("/"):
        return redirect(target)
    return redirect("web:inventory", page.project.id, page.environment)
