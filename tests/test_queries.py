"""A query string that comes again is parsed once per process (core/queries.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import QueryDict
from django.test import RequestFactory, override_settings
from rest_framework.test import APIClient

from memoryadmin.core import queries
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.core.queries import (
    QUERIES_KEPT,
    QUERY_MAX_CHARS,
    given_once_check,
    query_repeated,
    query_share,
)
from tests.helpers import DEV, DOCS

pytestmark = pytest.mark.django_db

QUERIES = [
    "environment=development",
    "a=1&a=2&b=",
    "q=caf%C3%A9+au+lait&empty",
    "x=%2B%26%3D&x=plus+sign",
    "name=%E2%9C%93&name=%F0%9F%98%80",
    "blank=&=nameless",
]


def _lists(query_dict: QueryDict) -> list[tuple[str, list[str]]]:
    return sorted(query_dict.lists())


@pytest.mark.parametrize("query", QUERIES)
def test_a_shared_parse_is_djangos_own(query: str) -> None:
    shared = RequestFactory().get(f"/x?{query}")
    query_share(shared)
    assert "GET" in shared.__dict__
    own = RequestFactory().get(f"/x?{query}")
    assert _lists(shared.GET) == _lists(own.GET) == _lists(QueryDict(query))
    assert _lists(shared.GET) != []


def test_requests_with_the_same_query_string_share_one_immutable_parse(
    api: APIClient, make_document: Any
) -> None:
    make_document("d1", text="one")
    first = api.get(f"{DOCS}/d1{DEV}")
    second = api.get(f"{DOCS}/d1{DEV}")
    assert first.status_code == second.status_code == 200
    assert first.json()["text"] == "one"
    assert first.wsgi_request.GET is second.wsgi_request.GET
    assert first.wsgi_request.GET["environment"] == "development"
    with pytest.raises(AttributeError):
        first.wsgi_request.GET["environment"] = "production"  # type: ignore[misc]
    assert second.wsgi_request.GET.getlist("environment") == ["development"]


@pytest.mark.parametrize(
    "query",
    ["", "q=caf\u00e9", f"q={'a' * QUERY_MAX_CHARS}"],
    ids=["none", "not ascii", "too long"],
)
def test_other_query_strings_are_left_to_django(query: str) -> None:
    request = RequestFactory().get("/x")
    request.META["QUERY_STRING"] = query
    query_share(request)
    assert "GET" not in request.__dict__
    assert _lists(request.GET) == _lists(QueryDict(query.encode("iso-8859-1")))


def test_a_request_whose_query_was_read_keeps_its_own() -> None:
    request = RequestFactory().get("/x?environment=development")
    own = request.GET
    query_share(request)
    assert request.GET is own


def test_new_query_strings_turn_the_oldest_over_within_the_bound() -> None:
    queries._parsed.cache_clear()
    for number in range(QUERIES_KEPT * 4):
        request = RequestFactory().get(f"/x?cursor={number}")
        query_share(request)
        assert request.GET["cursor"] == str(number)
    assert queries._parsed.cache_info().currsize == QUERIES_KEPT


def test_the_field_limit_in_force_applies_to_a_query_parsed_before(api: APIClient) -> None:
    url = "/api/managed-agents/sessions?environment=development&a=1&b=2"
    assert api.get(url).status_code == 200
    with override_settings(DATA_UPLOAD_MAX_NUMBER_FIELDS=2):
        refused = api.get(url)
    assert refused.status_code == 400
    assert api.get(url).status_code == 200


def test_which_names_a_shared_query_repeats_is_decided_with_its_parse() -> None:
    parsed = queries._parsed("environment=development&q=a&q=b", "utf-8", 1000)
    assert query_repeated(parsed) == frozenset({"q"})
    # Decided once: the shared parse answers without looking at its values again.
    parsed.__dict__["memoryadmin_repeated"] = frozenset({"marker"})
    assert query_repeated(parsed) == frozenset({"marker"})
    parsed.__dict__["memoryadmin_repeated"] = frozenset({"q"})
    # A copy of it (or a query that is not shared) is looked at.
    assert query_repeated(parsed.copy()) == frozenset({"q"})
    with pytest.raises(InvalidRequest, match="q must be given once"):
        given_once_check(parsed)
    given_once_check(parsed, repeatable=frozenset({"q"}))
    given_once_check({"memory": ["a", "b"], "agent": ["x"]}, repeatable=frozenset({"memory"}))
