"""The API's JSON renderer and content negotiation: the bytes and headers DRF's own
renderer and negotiation would give, on the answered-at-once path and off it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from rest_framework.renderers import JSONRenderer as DRFJSONRenderer
from rest_framework.test import APIClient

from memoryadmin.api.renderers import JSONRenderer
from tests.helpers import DEV, DOCS


def test_renders_as_drf_would() -> None:
    data: dict[str, Any] = {
        "text": "line\u2028next\u2029end é ✓ \x01",
        "when": datetime(2026, 9, 10, 12, 0, 0, 123456, tzinfo=UTC),
        "amount": Decimal("1.5"),
        "nested": [{"a": None, "b": True, "c": 1.25}],
    }
    ours = JSONRenderer().render(data, "application/json")
    assert ours == DRFJSONRenderer().render(data, "application/json")
    assert b"\\u2028" in ours
    assert b"\\u2029" in ours
    assert json.loads(ours)["when"] == "2026-09-10T12:00:00.123456Z"


def test_what_orjson_refuses_is_rendered_by_drf() -> None:
    data = {"big": 2**70, 3: "non-string key"}
    assert JSONRenderer().render(data) == DRFJSONRenderer().render(data)
    assert JSONRenderer().render(None) == b""


def test_an_asked_indent_is_honoured(api: APIClient, make_document: Any) -> None:
    make_document("workshop", text="hello")
    response = api.get(f"{DOCS}/workshop{DEV}", HTTP_ACCEPT="application/json; indent=2")
    assert response.status_code == 200
    assert response.content.startswith(b'{\n  "id": "workshop"')


def test_negotiation_answers_json_or_406(api: APIClient, make_document: Any) -> None:
    make_document("workshop", text="hello")
    url = f"{DOCS}/workshop{DEV}"
    for accept in (None, "*/*", "application/json", "text/html, application/json;q=0.9"):
        extra: dict[str, Any] = {} if accept is None else {"HTTP_ACCEPT": accept}
        response = api.get(url, **extra)
        assert response.status_code == 200, accept
        assert response["Content-Type"] == "application/json", accept
        assert response.json()["text"] == "hello"
        assert response["Allow"] == "GET, PUT, PATCH, DELETE, HEAD, OPTIONS"
    refused = api.get(url, HTTP_ACCEPT="text/html")
    assert refused.status_code == 406
    assert refused.json()["error"]["code"] == "not_acceptable"
    # `format` has nothing to choose between on a route of one renderer: ignored, as any
    # query parameter a route does not read (DRF answered a name not its own with 404).
    for name in ("json", "xml", "api", ""):
        response = api.get(f"{url}&format={name}")
        assert (response.status_code, response.json()["text"]) == (200, "hello"), name
    assert api.get(f"{url}&format=xml", HTTP_ACCEPT="text/html").status_code == 406
    missing = api.get(f"{DOCS}/missing{DEV}&format=xml")
    assert missing.json()["error"]["message"] == "No document 'missing' in resource 'notes'."
