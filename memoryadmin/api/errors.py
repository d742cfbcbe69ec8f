"""The API's failures, every one in the envelope (core/errors.py: error_envelope)."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from memoryadmin.core.errors import DomainError, envelope_of, error_envelope

DRF_CODES: dict[type[exceptions.APIException], str] = {
    exceptions.NotAuthenticated: "unauthorized",
    exceptions.AuthenticationFailed: "unauthorized",
    exceptions.PermissionDenied: "forbidden",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.ParseError: "invalid_request",
    exceptions.ValidationError: "invalid_request",
}


def _message(detail: Any) -> str:
    if isinstance(detail, dict):
        field, value = next(iter(detail.items()))
        inner = _message(value)
        return inner if field == "non_field_errors" else f"{field}: {inner}"
    if isinstance(detail, list) and detail:
        return _message(detail[0])
    return str(detail)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """The envelope for every route, with a domain error's details when it has any.

    Anything unexpected is left to Django's own 500 handling (the site's
    `memoryadmin.errorpages.server_error_view` answers it in the envelope, without
    details, or 503 when the database cannot be reached); DRF's handler and
    `set_rollback()` roll back the request's transaction either way.
    """
    if isinstance(exc, DomainError):
        set_rollback()
        return Response(envelope_of(exc), status=exc.status, headers=exc.headers())
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.APIException):
        code = next((c for cls, c in DRF_CODES.items() if isinstance(exc, cls)), "invalid_request")
        message = _message(exc.detail)
    else:  # Django's Http404 and PermissionDenied, which DRF's handler converted
        code = "not_found" if isinstance(exc, Http404) else "forbidden"
        message = str(response.data["detail"])
    response.data = error_envelope(code, message)
    return response
