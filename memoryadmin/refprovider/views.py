"""The reference provider's one endpoint: POST JSON in, JSON out, bearer token required."""

from __future__ import annotations

import hmac
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from memoryadmin.core.errors import DomainError, LimitExceeded, error_envelope
from memoryadmin.core.jsonbody import body_read, json_parse, stream_chunks
from memoryadmin.refprovider.declaration import reference_token
from memoryadmin.refprovider.services import ProtocolError, answer_bytes, call_handle


def _answer(payload: dict[str, Any], status: int = 200) -> HttpResponse:
    return HttpResponse(answer_bytes(payload), status=status, content_type="application/json")


def _error(status: int, code: str, message: str, **headers: str) -> HttpResponse:
    response = _answer(error_envelope(code, message), status=status)
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


def _authorized(request: HttpRequest) -> bool:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        token.strip().encode("utf-8"), reference_token().encode("utf-8")
    )


def _body(request: HttpRequest) -> Any:
    try:
        return json_parse(
            body_read(stream_chunks(request), declared=request.headers.get("Content-Length"))
        )
    except LimitExceeded as exc:
        raise ProtocolError(413, "too_large", exc.message) from exc
    except DomainError as exc:
        raise ProtocolError(400, "invalid_request", exc.message) from exc


@csrf_exempt
def endpoint(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _error(405, "method_not_allowed", "Use POST.", Allow="POST")
    if not _authorized(request):
        return _error(
            401, "unauthorized", "A valid bearer token is required.", WWW_Authenticate="Bearer"
        )
    if request.content_type != "application/json":
        return _error(415, "unsupported_media_type", "Send Content-Type: application/json.")
    try:
        return _answer(call_handle(_body(request)))
    except ProtocolError as exc:
        return _answer(exc.envelope(), status=exc.status)
