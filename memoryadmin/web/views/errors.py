"""The site's error pages (403, 404, 500, a refused CSRF token) in the Memory page's layout.

API routes answer in the JSON envelope instead (memoryadmin.api.errors decides which).
"""

from __future__ import annotations

import logging
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from memoryadmin.web.views.base import is_partial

logger = logging.getLogger(__name__)

MESSAGES = {
    403: "Your role does not allow this page or action.",
    404: "There is no page at this address. It may have been moved, or the link is mistyped.",
    500: "Something went wrong on our side and nothing was changed by this request. "
    "The error is logged; try again in a moment.",
}


def _offline_context() -> dict[str, Any]:
    # Nothing that needs the database: used when rendering with the user failed.
    from django.contrib.auth.models import AnonymousUser

    return {"user": AnonymousUser(), "messages": [], "memberships": []}


def site_error_page(
    request: HttpRequest, status: int, message: str | None = None, **extra: Any
) -> HttpResponse:
    """An error page with the site's header and the user's projects, for any status."""
    from memoryadmin.web.services.roles import memberships_for_user

    context: dict[str, Any] = {
        "status": status,
        "message": message or MESSAGES.get(status, MESSAGES[500]),
        "page": None,
        **extra,
    }
    template = "memoryadmin/error.html#message" if is_partial(request) else "memoryadmin/error.html"
    try:
        user = getattr(request, "user", None)
        memberships = memberships_for_user(user=user) if user is not None else []
        return render(request, template, {**context, "memberships": memberships}, status=status)
    except Exception:  # the error page must not fail in turn (e.g. the database went away)
        logger.warning("error page rendered without the user's context", exc_info=True)
        return render(request, template, {**context, **_offline_context()}, status=status)


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return site_error_page(request, 404)


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return site_error_page(request, 403)


def server_error(request: HttpRequest) -> HttpResponse:
    return site_error_page(request, 500)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    return site_error_page(
        request,
        403,
        "The form was sent without a valid security token (it may have been open for too "
        "long, or cookies are blocked). Nothing was changed: reload the page and try again.",
    )
