"""Hostile strings (NUL, every surrogate, characters outside the BMP, normalisation twins)
through the API, the Memory page's forms and memory_save: every answer is 2xx or a 4xx in the
envelope, what is stored reads back exactly, and every list that was readable stays readable.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st
from rest_framework.test import APIClient

from memoryadmin.core.strings import FORBIDDEN_RE, string_breaks_rule, string_problem
from memoryadmin.memory.models import Document
from tests.helpers import DEV, DOCS

pytestmark = pytest.mark.django_db

API = "/api/managed-agents"
SESSIONS = f"{API}/sessions"
PAGE = "/projects/acme/development"
# Characters, and sequences a JSON client may send: an escaped surrogate pair is one
# character once decoded; normalisation twins (é and e + U+0301) stay distinct.
SEQUENCES = ["e\u0301", "\u00e9", "\ud83d\ude00", "\ud83d", "\ude00"]
SPECIALS = [
    "\x00",
    "\ud800",
    "\udbff",
    "\udc00",
    "\udfff",
    "😀",
    "\U0010fffd",
    "\ufb01",
    "\ufeff",
    "\u2028",
    "\x7f",
    "\ufffd",
]
CHARACTERS = st.one_of(
    st.characters(),
    st.integers(min_value=0xD800, max_value=0xDFFF).map(chr),
    st.sampled_from(SPECIALS),
)
HOSTILE = st.lists(st.one_of(CHARACTERS, st.sampled_from(SEQUENCES)), min_size=1, max_size=8).map(
    "".join
)
NUMBERS = itertools.count()


def on_the_wire(value: str) -> str:
    """What the server decodes from `value` sent as JSON (escaped surrogate pairs join)."""
    return str(json.loads(json.dumps(value)))


def hostile(value: str) -> bool:
    return FORBIDDEN_RE.search(on_the_wire(value)) is not None


def answered_well(response: Any) -> Any:
    """2xx, or a 4xx whose body is the error envelope; never a 5xx."""
    assert response.status_code < 500, response.content
    if response.status_code >= 400:
        error = response.json()["error"]
        assert isinstance(error["code"], str)
        assert isinstance(error["message"], str)
    return response


def send_json(api: APIClient, method: str, url: str, body: Any, **headers: Any) -> Any:
    call = getattr(api, method)
    return answered_well(
        call(url, data=json.dumps(body), content_type="application/json", **headers)
    )


LISTS = {
    "documents": (f"{DOCS}{DEV}", f"{PAGE}/resources/notes/"),
    "sessions": (f"{SESSIONS}{DEV}", f"{PAGE}/sessions/"),
}


def lists_read(api: APIClient, page: Client, *names: str) -> None:
    """The lists an example could have changed still read, through the API and the page."""
    for name in names:
        api_url, page_url = LISTS[name]
        assert api.get(api_url).status_code == 200, api_url
        assert page.get(page_url).status_code == 200, page_url


@pytest.fixture
def page(owner: Client) -> Client:
    return owner


@given(value=HOSTILE)
def test_document_fields_through_the_api(api: APIClient, page: Client, value: str) -> None:
    doc_id = f"d{next(NUMBERS)}"
    body = {"title": value, "text": value, "summary": value[:60]}
    response = send_json(api, "put", f"{DOCS}/{doc_id}{DEV}", body, HTTP_IF_NONE_MATCH="*")
    if hostile(value):
        assert response.status_code == 400
        assert not Document.objects.filter(doc_id=doc_id).exists()
    elif response.status_code == 201:
        read = api.get(f"{DOCS}/{doc_id}{DEV}").json()
        # Stored as sent: no normalisation, no replacement.
        assert (read["title"], read["text"]) == (on_the_wire(value),) * 2
    lists_read(api, page, "documents")


@given(key=HOSTILE, value=HOSTILE)
def test_session_labels(api: APIClient, page: Client, key: str, value: str) -> None:
    body = {"agentId": "support-bot@development", "labels": {key: value}}
    idempotency_key = f"k{next(NUMBERS)}"
    response = send_json(api, "post", SESSIONS, body, HTTP_IDEMPOTENCY_KEY=idempotency_key)
    if hostile(key) or hostile(value):
        assert response.status_code == 400
    elif response.status_code == 201:
        assert response.json()["session"]["labels"] == {on_the_wire(key): on_the_wire(value)}
    lists_read(api, page, "sessions")


@given(value=HOSTILE)
def test_path_and_query(api: APIClient, page: Client, value: str) -> None:
    # What a client sends on the wire: UTF-8 bytes, percent-encoded (a lone surrogate
    # cannot be encoded, so it arrives as undecodable bytes, which Django replaces).
    encoded = quote(value, safe="", errors="surrogatepass")
    answered_well(api.get(f"{DOCS}/{encoded}{DEV}"))
    answered_well(api.get(f"{SESSIONS}{DEV}&agent={encoded}"))
    answered_well(api.get(f"{SESSIONS}/{encoded}"))
    for url in [
        f"{PAGE}/resources/notes/?q={encoded}",
        f"{PAGE}/audit/?resource={encoded}",
        f"{PAGE}/sessions/{encoded}/",
        f"/switch/?project={encoded}",
    ]:
        assert page.get(url).status_code < 500, url
    lists_read(api, page, "documents", "sessions")


@given(value=HOSTILE)
def test_memory_page_create_form(api: APIClient, page: Client, value: str) -> None:
    doc_id = f"p{next(NUMBERS)}"
    form = urlencode(
        {"doc_id": doc_id, "title": value, "summary": "", "text": value},
        errors="surrogatepass",
    )
    response = page.post(
        f"{PAGE}/resources/notes/new/", data=form, content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code in {302, 400, 422}, response.status_code
    stored = Document.objects.filter(doc_id=doc_id).first()
    if stored is not None:
        assert not hostile(stored.title + stored.text)
    if "\x00" in value:
        assert stored is None
    lists_read(api, page, "documents")


@given(text=HOSTILE, summary=HOSTILE)
def test_memory_save(
    api: APIClient, page: Client, make_document: Callable[..., Any], text: str, summary: str
) -> None:
    doc_id = f"s{next(NUMBERS)}"
    make_document(doc_id, text="before")
    memory = {"notes": {"scope": "document", "id": doc_id, "access": "read-write"}}
    created = send_json(
        api,
        "post",
        SESSIONS,
        {"agentId": "support-bot@development", "memory": memory},
        HTTP_IDEMPOTENCY_KEY=doc_id,
    )
    session_id = created.json()["session"]["id"]
    recall = send_json(api, "post", f"{SESSIONS}/{session_id}/memory/recall", {"use": ["notes"]})
    body = {
        "recallId": recall.json()["recallId"],
        "callId": "c1",
        "name": "memory_save",
        "arguments": {"text": text, "summary": summary},
    }
    response = send_json(api, "post", f"{SESSIONS}/{session_id}/memory/tool-calls", body)
    document = Document.objects.get(doc_id=doc_id)
    if hostile(text) or hostile(summary):
        assert response.status_code == 400
        assert document.text == "before"
    elif response.status_code == 200 and response.json()["result"]["status"] == "saved":
        assert (document.text, document.summary) == (on_the_wire(text), on_the_wire(summary))
    lists_read(api, page, "documents", "sessions")


@given(
    text=st.lists(st.one_of(CHARACTERS, st.sampled_from(["a", " ", "~"])), max_size=40).map("".join)
)
def test_the_quick_check_agrees_with_the_pattern_on_every_string(text: str) -> None:
    match = FORBIDDEN_RE.search(text)
    assert string_breaks_rule(text) is (match is not None)
    problem = string_problem(text)
    if match is None:
        assert problem is None
    elif match.group() == "\x00":
        assert problem == "a NUL character (U+0000)"
    else:
        assert problem == f"an unpaired surrogate (U+{ord(match.group()):04X})"
