"""Floor views for `make bench`: one SQL statement behind a bare Django view.

Routed only when `MEMORYADMIN_BENCH_FLOORS` is on (never in production), so the
bench measures the API and its floor in the same server processes, through the
same middleware, and reports the API's numbers as ratios of these. Beside them,
a constant JSON view (on an API route and on a page route) measures what the
stack itself costs, against the raw WSGI answer of `memoryadmin/wsgi.py` for
`RAW_PATH`, which never reaches Django, and against the same view behind Django's
own WSGI handler with no middleware at all (`BARE_PATH`): what Django's handler
costs before any middleware of ours or its own.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterable
from typing import Any

from django.core.handlers.wsgi import WSGIHandler
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test.utils import override_settings
from django.urls import path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

# On an API route, as the API's requests are (API routes skip the page's middleware).
PREFIX = "api/managed-agents/bench/"
CONSTANT_API_PATH = f"/{PREFIX}constant"
CONSTANT_PAGE_PATH = "/bench/constant"
RAW_PATH = "/bench/raw"
BARE_PATH = "/bench/bare"
CONSTANT = b'{"status": "ok"}'

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class BareHandler(WSGIHandler):
    """Django's WSGI handler with an empty middleware list."""

    def load_middleware(self, is_async: bool = False) -> None:
        with override_settings(MIDDLEWARE=[]):
            super().load_middleware(is_async)


def raw_wsgi(app: WSGIApp) -> WSGIApp:
    """`app`, except that `RAW_PATH` is answered here with `CONSTANT` (no Django at all)
    and `BARE_PATH` by Django without middleware."""
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(CONSTANT)))]
    bare = BareHandler()

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO")
        if path == RAW_PATH:
            start_response("200 OK", headers)
            return [CONSTANT]
        if path == BARE_PATH:
            return bare(environ, start_response)
        return app(environ, start_response)

    return application


COLUMNS = ("doc_id", "title", "summary", "text", "revision", "bytes", "updated_at")


def document_read(request: HttpRequest, resource_pk: int, doc_id: str) -> HttpResponse:
    """One SELECT by the document's unique key."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(COLUMNS)} FROM memory_document"
            " WHERE resource_id = %s AND doc_id = %s AND NOT deleted",
            [resource_pk, doc_id],
        )
        row = cursor.fetchone()
    if row is None:
        return JsonResponse({}, status=404)
    return JsonResponse(dict(zip(COLUMNS, row, strict=True)), headers={"ETag": f'"{row[4]}"'})


def constant(request: HttpRequest) -> HttpResponse:
    """No database, no template: the same bytes as the raw WSGI answer."""
    return HttpResponse(CONSTANT, content_type="application/json")


@csrf_exempt
def document_update(request: HttpRequest, resource_pk: int, doc_id: str) -> HttpResponse:
    """One `UPDATE ... WHERE revision = ...` (autocommit), as a conditional PUT does."""
    text = json.loads(request.body)["text"]
    expected = request.headers.get("If-Match", "").strip('"')
    revision = secrets.token_hex(10)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memory_document SET text = %s, bytes = %s, revision = %s, updated_at = %s"
            " WHERE resource_id = %s AND doc_id = %s AND revision = %s AND NOT deleted",
            [text, len(text.encode()), revision, timezone.now(), resource_pk, doc_id, expected],
        )
        changed = cursor.rowcount
    if not changed:
        return JsonResponse({}, status=412)
    return JsonResponse({"revision": revision}, headers={"ETag": f'"{revision}"'})


urlpatterns = [
    path(CONSTANT_API_PATH.lstrip("/"), constant),
    path(CONSTANT_PAGE_PATH.lstrip("/"), constant),
    path(BARE_PATH.lstrip("/"), constant),
    path(f"{PREFIX}floor/<int:resource_pk>/<str:doc_id>", document_read),
    path(f"{PREFIX}floor-put/<int:resource_pk>/<str:doc_id>", document_update),
]
