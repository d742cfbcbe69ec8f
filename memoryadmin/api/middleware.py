"""The request door, before any view, session or user is looked at.

- `PageMiddleware`: sessions, users and messages only for page routes.

- The string rule (memoryadmin.core.strings) for the path, every query
  parameter (names included) and every header: 400 `invalid_request` naming
  the field, as the JSON envelope on API routes and as an error page on the
  Memory page.
- Bodies without a Content-Length (`Transfer-Encoding: chunked`) are read
  within the same limit as any other body (413 when over), not as empty. A
  WSGI server that does not promise a terminated input stream cannot be read
  safely: such requests are 411.
- A body in a content coding (`Content-Encoding: gzip`, ...) is 415: no door decodes
  one (core/jsonbody.py).
- A query string that comes again is parsed once per process (core/queries.py).
"""

from __future__ import annotations

import copy
import io
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.exception import convert_exception_to_response
from django.core.handlers.wsgi import WSGIRequest
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware import csp
from django.shortcuts import render
from django.utils.csp import CSP, build_policy
from django.utils.module_loading import import_string

from memoryadmin.api.throttling import USAGE_COUNTED
from memoryadmin.core.errors import DomainError, envelope_of
from memoryadmin.core.jsonbody import (
    BODY_MAX_BYTES,
    body_read,
    content_coding_check,
    stream_chunks,
)
from memoryadmin.core.queries import query_share
from memoryadmin.core.strings import string_check, string_problem, strings_check
from memoryadmin.core.users import user_settled
from memoryadmin.memory.services.key_usage import key_usage_count

API_PREFIXES = ("/api/", "/reference-provider/")


class LengthRequired(DomainError):
    status = 411
    code = "length_required"


def is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIXES)


def _header_name(meta_key: str) -> str:
    return meta_key.removeprefix("HTTP_").replace("_", "-").title()


_LENGTH_AND_TYPE = frozenset({"CONTENT_TYPE", "CONTENT_LENGTH"})


def _headers(request: HttpRequest) -> list[tuple[str, str]]:
    return [
        (key, value)
        for key, value in request.META.items()
        if (key.startswith("HTTP_") or key in _LENGTH_AND_TYPE) and isinstance(value, str)
    ]


def request_strings_check(request: HttpRequest) -> None:
    """The string rule for the path, the query (names and values) and every header.

    One search of them all first: only a request that breaks the rule is checked part by
    part, to name the field (the query is parsed only when there is one)."""
    headers = _headers(request)
    query = request.META.get("QUERY_STRING")
    parts = [request.path, *(value for _, value in headers)]
    if query:
        parts.extend(f"{name}\n{value}" for name, values in request.GET.lists() for value in values)
    if string_problem("\n".join(parts)) is None:
        return
    string_check(request.path, field="path")
    if query:
        for name, values in request.GET.lists():
            for value in values:
                strings_check({name: value}, field="query")
    for key, value in headers:
        strings_check({_header_name(key): value}, field="header")


def chunked_body_read(request: HttpRequest) -> None:
    """Reads a body sent without a length, so that every parser sees it with one."""
    if (
        request.META.get("CONTENT_LENGTH")
        or "chunked" not in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
    ):
        return
    if isinstance(request, WSGIRequest):
        if not request.environ.get("wsgi.input_terminated"):
            raise LengthRequired("This server cannot read a body without Content-Length; send one.")
        source: object = request.environ["wsgi.input"]
    else:
        # ASGI servers hand over the whole body, already de-chunked.
        source = request
    limit = BODY_MAX_BYTES
    if not is_api(request):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE or BODY_MAX_BYTES
    body = body_read(stream_chunks(source), limit=limit)
    request.META["CONTENT_LENGTH"] = str(len(body))
    request._stream = io.BytesIO(body)


def refusal(request: HttpRequest, exc: DomainError) -> HttpResponse:
    if is_api(request):
        return JsonResponse(envelope_of(exc), status=exc.status, headers=exc.headers())
    context = {"status": exc.status, "message": exc.message}
    response = render(request, "memoryadmin/error.html", context, status=exc.status)
    for name, value in exc.headers().items():
        response[name] = value
    return response


class RequestDoorMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            query_share(request)
            request_strings_check(request)
            content_coding_check(request.META.get("HTTP_CONTENT_ENCODING"))
            chunked_body_read(request)
        except DomainError as exc:
            return refusal(request, exc)
        return self.get_response(request)


class PageMiddleware:
    """`PAGE_MIDDLEWARE` (sessions, the signed-in user, messages, htmx) for page routes
    only: API routes authenticate by key and never read them, so they skip their work.

    The wrapped middleware may only act around the request (no `process_view`,
    `process_exception` or `process_template_response`: Django calls those only for
    the middleware it builds itself).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.api = get_response
        page: Callable[[HttpRequest], Any] = get_response
        for name in reversed(settings.PAGE_MIDDLEWARE):
            middleware = import_string(name)
            hooks = ("process_view", "process_exception", "process_template_response")
            if any(hasattr(middleware, hook) for hook in hooks):
                raise ImproperlyConfigured(f"{name} needs its place in MIDDLEWARE")
            page = convert_exception_to_response(middleware(page))
        self.page = page

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if is_api(request):
            return self.api(request)
        response: HttpResponse = self.page(request)
        _unlink(request)
        return response


# What the page's middleware leave on a request that holds the request itself (the lazy
# user's and `auser`'s closures, the message storage, htmx's details), read by nothing
# outside them once the response is made. Left there, the request and all it read are
# in reference cycles that only the garbage collector frees (a pass every 15 requests,
# about 450 us); the user, once read, stays as itself for the request log.
_PAGE_ONLY = ("auser", "_messages", "htmx")


def _unlink(request: HttpRequest) -> None:
    attributes = request.__dict__
    for name in _PAGE_ONLY:
        attributes.pop(name, None)
    user_settled(request)


class KeyUsageMiddleware:
    """Counts each finished API request of an API key (memory/services/key_usage.py): in
    the shared cache, never the database."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        key = getattr(request.__dict__.get("user"), "key", None)
        if key is not None and is_api(request):
            counted = request.__dict__.get(USAGE_COUNTED, False)
            key_usage_count(key_id=key.pk, status=response.status_code, requests_counted=counted)
        return response


class ContentSecurityPolicyMiddleware(csp.ContentSecurityPolicyMiddleware):
    """Django's, with the settings' policies built once per process for the responses that
    use no nonce and set no policy of their own (nearly all): Django builds the header
    again for every response."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        super().__init__(get_response)
        self.built: tuple[Any, Any, list[tuple[str, str]]] | None = None

    def _policies(self) -> list[tuple[str, str]]:
        configs = (settings.SECURE_CSP, settings.SECURE_CSP_REPORT_ONLY)
        built = self.built
        if built is None or (built[0], built[1]) != configs:
            headers = zip((CSP.HEADER_ENFORCE, CSP.HEADER_REPORT_ONLY), configs, strict=True)
            policies = [(str(h), build_policy(c)) for h, c in headers if c]  # type: ignore[arg-type]
            built = self.built = (copy.deepcopy(configs[0]), copy.deepcopy(configs[1]), policies)
        return built[2]

    def process_response(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        own = hasattr(response, "_csp_config") or hasattr(response, "_csp_ro_config")
        if own or csp.get_nonce(request):
            return super().process_response(request, response)
        for header, policy in self._policies():
            if header not in response:
                response.headers[header] = policy
        return response
