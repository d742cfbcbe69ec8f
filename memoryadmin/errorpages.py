"""The site's error pages (handler403, handler404, handler500 of the root URLconf).

A failure outside any view is answered by the door its path belongs to: the error
envelope on the API's routes and the reference provider's (`api.middleware.is_api`, the
request door's own rule), the Memory page's own page elsewhere. Both doors sit on
top of the apps, so this one module, beside the URLconf, chooses between them.
"""

from __future__ import annotations

import sys

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import bad_request

from memoryadmin.api.middleware import is_api
from memoryadmin.core.dbstate import (
    database_unavailable,
    statement_timed_out,
    unavailable_answer,
)
from memoryadmin.core.errors import error_envelope
from memoryadmin.metrics import DATABASE_UNAVAILABLE
from memoryadmin.web.views.base import unavailable_page
from memoryadmin.web.views.errors import page_not_found, permission_denied, server_error


def bad_request_view(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A request Django refuses before any view (a Host not allowed, too many query
    fields): on API routes in the envelope, as every other answer there."""
    if is_api(request):
        return JsonResponse(
            error_envelope("invalid_request", "The request could not be read."), status=400
        )
    return bad_request(request, exception)


def not_found_view(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if is_api(request):
        return JsonResponse(error_envelope("not_found", "No such route."), status=404)
    return page_not_found(request, exception)


def permission_denied_view(
    request: HttpRequest, exception: Exception | None = None
) -> HttpResponse:
    if is_api(request):
        return JsonResponse(error_envelope("forbidden", "Not allowed."), status=403)
    return permission_denied(request, exception)


def server_error_view(request: HttpRequest) -> HttpResponse:
    # Django calls this while handling the exception, which says what went wrong.
    exc = sys.exc_info()[1]
    if exc is not None and database_unavailable(exc):
        DATABASE_UNAVAILABLE.inc()
        # The request log's `request_failed` said why, in one line (logs.py): nothing more.
        body, headers = unavailable_answer(exc, log=False)
        if is_api(request):
            response: HttpResponse = JsonResponse(body, status=503, headers=headers)
        else:
            response = unavailable_page(request, headers, took_too_long=statement_timed_out(exc))
        # Django's own line of the answer, its traceback with it, is not written either.
        response._has_been_logged = True  # type: ignore[attr-defined]
        return response
    if is_api(request):
        return JsonResponse(
            error_envelope("internal_error", "An internal error occurred."), status=500
        )
    return server_error(request)
