"""A request leaves nothing for the garbage collector: what it made is freed when it ends.

Django's and DRF's objects hold each other (a view its own bound method, DRF's request
its parser context, a response its renderer context, the page's middleware the request,
a template's context its pushed dicts); left in cycles, every request and all it read
waited for the collector's passes. Each request here goes through Django's WSGI handler,
the full middleware, as gunicorn calls it, with the collector off and told to keep what
it finds; afterwards it finds nothing.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.db import close_old_connections
from django.test import Client, RequestFactory

from memoryadmin.memory.models import Document, Resource
from tests.helpers import Keys

pytestmark = pytest.mark.django_db


def _environ(
    path: str, method: str = "GET", body: bytes = b"", /, **headers: str
) -> dict[str, Any]:
    """The WSGI environ of a request, as the test client builds it."""
    request = RequestFactory().generic(
        method, path, data=body, content_type="application/json", headers=headers
    )
    return request.environ


def _call(app: WSGIHandler, environ: dict[str, Any]) -> tuple[str, dict[str, str], bytes]:
    """One request through the handler. The test's database connection stays open (as
    the test client keeps it): its transaction holds the fixtures."""
    got: dict[str, Any] = {}

    def write(data: bytes) -> None:
        raise AssertionError("Django answers through the iterable, never write()")

    def start_response(
        status: str, headers: list[tuple[str, str]], exc_info: Any = None, /
    ) -> Callable[[bytes], object]:
        got["status"], got["headers"] = status, dict(headers)
        return write

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        body = app(environ, start_response)
        content = b"".join(body)
        body.close()
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)
    return got["status"], got["headers"], content


@pytest.fixture
def garbage() -> Iterator[Callable[[], list[str]]]:
    """The kinds of object the collector would free, found by a full pass over what the
    calls made since the last look left; then freed."""
    gc.collect()
    gc.disable()

    def found() -> list[str]:
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect()
            kinds = sorted({type(o).__qualname__ for o in gc.garbage})
        finally:
            gc.garbage.clear()
            gc.set_debug(0)
        gc.collect()  # kept by DEBUG_SAVEALL until now
        return kinds

    try:
        yield found
    finally:
        gc.enable()


def _left[T](garbage: Callable[[], list[str]], requests: Callable[[], T]) -> tuple[T, list[str]]:
    """What `requests` answered and the garbage it left, measured up to three times: a
    cycle the requests make is there every time, while another thread of the process (a
    test's server finishing a request late) can leave some during one measurement."""
    for _ in range(3):
        garbage()
        answered = requests()
        left = garbage()
        if not left:
            break
    return answered, left


def test_api_requests_leave_no_cycles(
    keys: Keys, notes: Resource, workshop: Document, garbage: Callable[[], list[str]]
) -> None:
    app = WSGIHandler()
    docs = "/api/managed-agents/projects/acme/memory/notes/documents"
    q = "?environment=development"
    key = {"x-api-key": keys.owner}
    calls = [
        _environ(f"{docs}/workshop{q}", **key),
        _environ(f"{docs}{q}", **key),
        _environ(f"{docs}/workshop{q}", "HEAD", **key),
        _environ(f"{docs}/missing{q}", **key),
        _environ(f"{docs}/workshop{q}", **{"x-api-key": "mak_wrong"}),
    ]

    def put(text: bytes) -> str:
        etag = _call(app, _environ(f"{docs}/workshop{q}", **key))[1]["ETag"]
        body = b'{"text": "%s"}' % text
        return _call(
            app, _environ(f"{docs}/workshop{q}", "PUT", body, **{"If-Match": etag}, **key)
        )[0]

    # The first requests build what a process keeps (the handler's, each input's shape).
    _call(app, calls[0])
    put(b"first")
    statuses, left = _left(
        garbage, lambda: [*(_call(app, environ)[0] for environ in calls), put(b"replaced")]
    )

    assert [s.split()[0] for s in statuses] == ["200", "200", "200", "404", "401", "200"]
    assert Document.objects.get(pk=workshop.pk).text == "replaced"
    assert left == []


def test_memory_pages_leave_no_cycles(
    people: Any, notes: Resource, workshop: Document, garbage: Callable[[], list[str]]
) -> None:
    web = Client()
    web.force_login(get_user_model().objects.get(username="olivia"))
    web.get("/projects/acme/development/")  # the CSRF cookie a browser holds
    cookie = "; ".join(
        f"{name}={web.cookies[name].value}"
        for name in (settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME)
    )
    app = WSGIHandler()
    pages = [
        "/projects/acme/development/resources/notes/",
        "/projects/acme/production/",
        "/projects/acme/development/resources/notes/documents/workshop/",
        "/projects/acme/development/resources/nowhere/",
    ]
    _call(app, _environ(pages[0], Cookie=cookie))
    (answers, fragment), left = _left(
        garbage,
        lambda: (
            [_call(app, _environ(path, Cookie=cookie)) for path in pages],
            _call(app, _environ(pages[0], Cookie=cookie, **{"HX-Request": "true"})),
        ),
    )

    assert [status.split()[0] for status, _, _ in answers] == ["200", "200", "200", "404"]
    assert b"<code>workshop</code>" in answers[0][2]
    assert b"<body" not in fragment[2]
    assert b"workshop" in fragment[2]
    assert left == []
