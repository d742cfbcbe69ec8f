"""Every route the product serves, asked with every method by each kind of caller: never
a 5xx, and on the management API's routes every error is the documented envelope.

Each URL pattern is filled in with the fixtures' names (project acme, its development
environment, the notes resource, the workshop document, a live session; anything else a
name nothing has) and asked by an anonymous client, a signed-in owner and an API key, with
a body and a query of values no form or route expects.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client

from memoryadmin.agents.models import Session
from memoryadmin.memory.models import Document
from tests.helpers import url_routes

pytestmark = pytest.mark.django_db

API = "/api/managed-agents/"
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE")
# What a filter, a cursor, a sort or a date could be asked with, none of it valid.
HOSTILE_QUERY = {
    "environment": "development",
    "q": "\u202eevil",
    "cursor": "not-a-cursor",
    "sort": "sideways",
    "asOf": "yesterday",
    "updatedFrom": "2026-13-45",
    "sizeMin": "-1",
    "writer": "nobody",
    "select": "all",
    "versions": "99999999999999999999",
}
FORM = {"text": "\u202e", "revision": "x", "doc": "workshop:nope", "action": "explode"}
JSON_BODY = json.dumps({"text": 1, "use": "notes", "name": ["x"], "memory": {"a": None}})


def _url(route: str, session_id: str) -> str:
    names = {
        "p": "acme",
        "e": "development",
        "r": "notes",
        "d": "workshop",
        "doc_id": "workshop",
        "session_id": session_id,
    }
    filled = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: names.get(m.group(1), "x1"), route)
    return "/" + filled


def _ask(client: Client, method: str, url: str, query: dict[str, str], as_json: bool) -> Any:
    asked: dict[str, Any] = {"QUERY_STRING": urlencode(query)}
    if method in {"GET", "HEAD", "OPTIONS", "TRACE"}:
        return client.generic(method, url, **asked)
    if as_json:
        return client.generic(method, url, JSON_BODY, content_type="application/json", **asked)
    form = urlencode(FORM)
    return client.generic(
        method, url, form, content_type="application/x-www-form-urlencoded", **asked
    )


def _api_error(url: str, method: str, response: Any) -> bool:
    return url.startswith(API) and response.status_code >= 400 and method != "HEAD"


def _envelope(response: Any) -> bool:
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(error.get("code"), str) and isinstance(error.get("message"), str)


def test_no_route_answers_any_method_with_a_server_error(
    client: Client, owner: Client, api: Any, session: Session, workshop: Document, settings: Any
) -> None:
    # The sweep asks each route as fast as it can, more than a person's rate of pages.
    settings.MEMORYADMIN_PAGE_RATE = settings.MEMORYADMIN_PROJECT_PAGE_RATE = "100000/minute"
    # Signing out would sign the owner's client out for the rest of the sweep.
    routes = [r for r, _, _ in url_routes() if r != "logout/"]
    assert len(routes) > 60, routes
    failures: list[tuple[Any, ...]] = []
    asked = 0
    callers = (("anonymous", client, False), ("owner", owner, False), ("key", api, True))
    for name, who, as_json in callers:
        for route in routes:
            url = _url(route, session.id)
            for method in METHODS:
                both = method in {"GET", "POST"}
                for query in [HOSTILE_QUERY, {"environment": "development"}][: 2 if both else 1]:
                    response = _ask(who, method, url, query, as_json)
                    asked += 1
                    where = (name, method, url, response.status_code)
                    if response.status_code >= 500:
                        failures.append(where)
                    elif _api_error(url, method, response) and not _envelope(response):
                        failures.append((*where, response.content[:80]))
    assert not failures, failures
    assert asked > 1500
    # Every change of the text the sweep asked for was refused (freezing and unfreezing,
    # which take no revision, were done: the owner's form asked for both, in that order).
    after = Document.objects.get(pk=workshop.pk)
    assert (after.text, after.title, after.deleted) == (workshop.text, workshop.title, False)
    assert after.agent_writes


def test_the_api_reference_page_is_read_only(client: Client) -> None:
    """The reference page answers GET; any other method is 405 naming GET and HEAD, not the
    page rendered without its values (OPTIONS) or an error page no template backend could
    render (POST)."""
    assert client.get("/api/docs/").status_code == 200
    for method in ("POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
        response = client.generic(method, "/api/docs/")
        assert response.status_code == 405, (method, response.content)
        assert response["Allow"] == "GET, HEAD", method
        assert response.content == b"405 Method Not Allowed"
