"""One error envelope for every failure: {"error": {"code", "message"}}."""

from __future__ import annotations

import logging
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from rest_framework import exceptions
from rest_framework.response import Response

from memoryadmin.api.parsers import BodyTooLarge
from memoryadmin.memory.errors import DomainError

logger = logging.getLogger(__name__)

DRF_CODES: dict[type[exceptions.APIException], str] = {
    BodyTooLarge: "memory_limit_exceeded",
    exceptions.NotAuthenticated: "unauthorized",
    exceptions.AuthenticationFailed: "unauthorized",
    exceptions.PermissionDenied: "forbidden",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "rate_limited",
    exceptions.ParseError: "invalid_request",
    exceptions.ValidationError: "invalid_request",
}


def envelope(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


def _message(detail: Any) -> str:
    if isinstance(detail, dict):
        field, value = next(iter(detail.items()))
        inner = _message(value)
        return inner if field == "non_field_errors" else f"{field}: {inner}"
    if isinstance(detail, list) and detail:
        return _message(detail[0])
    return str(detail)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    if isinstance(exc, DomainError):
        return Response(envelope(exc.code, exc.message), status=exc.status)
    if isinstance(exc, Http404):
        return Response(envelope("not_found", "Not found."), status=404)
    if isinstance(exc, exceptions.APIException):
        code = next((c for cls, c in DRF_CODES.items() if isinstance(exc, cls)), "invalid_request")
        headers = {}
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header  # type: ignore[attr-defined]
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(int(exc.wait))  # type: ignore[attr-defined]
        return Response(
            envelope(code, _message(exc.detail)), status=exc.status_code, headers=headers
        )
    logger.exception("Unhandled error in %s", context.get("view"))
    return Response(envelope("internal_error", "An internal error occurred."), status=500)


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def not_found_view(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return JsonResponse(envelope("not_found", "No such route."), status=404)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception or Http404())


def server_error_view(request: HttpRequest) -> HttpResponse:
    if _is_api(request):
        return JsonResponse(envelope("internal_error", "An internal error occurred."), status=500)
    from django.views.defaults import server_error

    return server_error(request)
