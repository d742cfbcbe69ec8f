"""Property-based search over the pages' queries: any of the parameters the pages read,
with any text, dates at the ends of the calendar and numbers past 64 bits, asked of each
page a member reads, as a full page and as an htmx request: never a 5xx, and a page that
refuses says why in the page's own words (its error page), not Django's.

`tests/test_every_route.py` asks every route with one hostile query; this one searches
the values for the pages that read most of them.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryadmin.agents.models import Session
from memoryadmin.memory.models import Document

pytestmark = pytest.mark.django_db

PROJECT = "/projects/acme/development/"
NOTES = f"{PROJECT}resources/notes/"
PAGES = [
    PROJECT,
    NOTES,
    f"{NOTES}total/",
    f"{NOTES}as-of/",
    f"{NOTES}documents/workshop/",
    f"{PROJECT}audit/",
    f"{PROJECT}search/",
    f"{PROJECT}sessions/",
    f"{PROJECT}review/",
    f"{PROJECT}overview/",
    f"{PROJECT}incidents/",
    f"{PROJECT}erasures/",
    f"{PROJECT}export/",
]
# What the pages' views and the document list's facets read from the query.
PARAMS = [
    "q",
    "cursor",
    "after",
    "sort",
    "asOf",
    "versions",
    "select",
    "state",
    "status",
    "kind",
    "agent",
    "memory",
    "namespace",
    "value",
    "format",
    "agentWrites",
    "writer",
    "key",
    "session",
    "updatedFrom",
    "updatedTo",
    "sizeMin",
    "sizeMax",
]
VALUES = st.one_of(
    st.text(max_size=40),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.dates().map(str),
    st.datetimes().map(lambda moment: moment.isoformat() + "Z"),
    st.sampled_from(["", "9999-12-31", "0001-01-01", "agent", "owner", "-updated", "all"]),
)


@settings(max_examples=120)
@given(
    page=st.sampled_from(PAGES),
    query=st.dictionaries(st.sampled_from(PARAMS), VALUES, max_size=4),
    htmx=st.booleans(),
)
def test_no_page_query_is_a_server_error(
    owner: Client,
    workshop: Document,
    session: Session,
    page: str,
    query: dict[str, str],
    htmx: bool,
) -> None:
    headers: dict[str, Any] = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    response = owner.get(page, query, **headers)
    assert response.status_code < 500, (page, query, response.content[:300])
    if response.status_code >= 400 and not htmx:
        assert b"<html" in response.content.lower(), (page, query, response.content[:300])
