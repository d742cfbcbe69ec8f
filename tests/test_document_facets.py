"""The document list's facets: agent-write state, last writer (owner, key, agent, session),
updated range and size, combinable with the id/title filter, the same on the page and in
the API (memoryadmin/memory/services/document_filters.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from rest_framework.test import APIClient

from memoryadmin.agents.models import Session
from memoryadmin.memory.models import Document, Project, Resource
from memoryadmin.memory.services.document_filters import document_facets
from memoryadmin.memory.services.documents import (
    document_count,
    document_list,
    document_replace,
    document_set_review,
)
from tests.helpers import DEV, DOCS, agent_save, html_of, support_session


@pytest.fixture
def mixed(project: Project, notes: Resource, make_document: Any) -> Session:
    """Six documents of notes: by an owner, by a key, by an agent session; frozen, in
    review, allowed; small and large; updated on different days."""
    make_document("plan", title="Plan", text="x" * 10)
    make_document("frozen-plan", title="Frozen plan", text="x" * 200, agent_writes=False)
    keyed = make_document("keyed", title="Keyed", text="x" * 50)
    document_replace(
        resource=notes,
        doc_id="keyed",
        expected_revision=keyed.revision,
        text="y" * 60,
        actor="key:mak_abcd1234",
    )
    workshop = make_document("workshop", title="Workshop", text="x" * 5)
    session = support_session(project)
    agent_save(
        notes,
        "workshop",
        workshop.revision,
        "z" * 30,
        session_id=session.id,
        actor=f"agent:{session.id}",
    )
    make_document("reviewed", title="Reviewed", text="x" * 1000)
    document_set_review(resource=notes, doc_id="reviewed", review=True, actor="test")
    make_document("old", title="Old plan", text="x" * 20)
    days = {"plan": 10, "frozen-plan": 11, "keyed": 12, "workshop": 12, "reviewed": 13, "old": 1}
    for doc_id, day in days.items():
        Document.objects.filter(doc_id=doc_id).update(
            updated_at=datetime(2026, 3, day, 9, tzinfo=UTC)
        )
    return session


def listed(resource: Resource, query: str = "", **params: str) -> list[str]:
    facets = document_facets(params)
    rows, _ = document_list(resource=resource, query=query, facets=facets, sort="id")
    assert document_count(resource=resource, query=query, facets=facets) == len(rows)
    return [row["doc_id"] for row in rows]


def test_each_facet_keeps_its_documents(notes: Resource, mixed: Session) -> None:
    assert listed(notes, agentWrites="disabled") == ["frozen-plan"]
    assert listed(notes, agentWrites="review") == ["reviewed"]
    assert listed(notes, agentWrites="enabled") == ["keyed", "old", "plan", "workshop"]
    assert listed(notes, writer="key") == ["keyed"]
    assert listed(notes, key="mak_abcd1234") == ["keyed"]
    assert listed(notes, key="mak_other") == []
    assert listed(notes, writer="agent") == ["workshop"]
    assert listed(notes, session=mixed.id) == ["workshop"]
    assert listed(notes, agent="support-bot") == ["workshop"]
    assert listed(notes, agent="archivist") == []
    assert listed(notes, writer="owner") == ["frozen-plan", "old", "plan", "reviewed"]
    assert listed(notes, updatedFrom="2026-03-12") == ["keyed", "reviewed", "workshop"]
    assert listed(notes, updatedFrom="2026-03-11", updatedTo="2026-03-12") == [
        "frozen-plan",
        "keyed",
        "workshop",
    ]
    assert listed(notes, updatedTo="2026-03-12T09:00:00Z") == ["frozen-plan", "old", "plan"]
    assert listed(notes, sizeMin="60", sizeMax="200") == ["frozen-plan", "keyed"]


def test_facets_combine_with_each_other_and_with_the_filter(
    notes: Resource, mixed: Session
) -> None:
    assert listed(notes, "plan", writer="owner") == ["frozen-plan", "old", "plan"]
    assert listed(notes, "plan", writer="owner", agentWrites="enabled") == ["old", "plan"]
    assert listed(notes, "plan", writer="owner", agentWrites="enabled", sizeMin="15") == ["old"]


def test_a_review_default_of_the_resource_counts_for_documents_without_their_own(
    notes: Resource, mixed: Session
) -> None:
    notes.config = {**notes.config, "agentWrites": "review"}
    notes.save()
    assert listed(notes, agentWrites="review") == ["keyed", "old", "plan", "reviewed", "workshop"]
    assert listed(notes, agentWrites="enabled") == []


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"agentWrites": "frozen"}, "agentWrites"),
        ({"writer": "robot"}, "writer"),
        ({"sizeMin": "-1"}, "sizeMin"),
        ({"sizeMin": "٣"}, "sizeMin"),
        ({"sizeMin": "9", "sizeMax": "3"}, "sizeMin"),
        ({"updatedFrom": "yesterday"}, "updatedFrom"),
        ({"updatedFrom": "2026-03-12", "updatedTo": "2026-03-11"}, "updatedFrom"),
        ({"writer": "owner", "key": "mak_abcd1234"}, "writer"),
        ({"key": "mak_abcd1234", "session": "ses_1"}, "key"),
        ({"session": "a b"}, "session"),
        ({"agent": "Not An Agent"}, None),
    ],
)
def test_the_api_refuses_a_facet_that_does_not_parse(
    api: APIClient, mixed: Session, params: dict[str, str], field: str | None
) -> None:
    query = "&".join(f"{name}={value}" for name, value in params.items())
    response = api.get(f"{DOCS}{DEV}&{query}")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    if field:
        assert error["details"]["field"] == field


def test_the_api_lists_with_the_same_facets_and_pages_with_them(
    api: APIClient, notes: Resource, mixed: Session, make_document: Any
) -> None:
    for i in range(55):
        make_document(f"bulk-{i:02d}", text="q" * 100)
    response = api.get(f"{DOCS}{DEV}&sizeMin=100&sizeMax=100")
    body = response.json()
    assert response.status_code == 200
    assert len(body["documents"]) == 50
    more = api.get(f"{DOCS}{DEV}&sizeMin=100&sizeMax=100&cursor={body['nextCursor']}").json()
    assert len(more["documents"]) == 5
    assert more["nextCursor"] is None
    # A cursor belongs to its facets.
    other = api.get(f"{DOCS}{DEV}&sizeMin=99&cursor={body['nextCursor']}")
    assert other.status_code == 400
    keyed = api.get(f"{DOCS}{DEV}&writer=key").json()["documents"]
    assert [d["id"] for d in keyed] == ["keyed"]
    assert api.get(f"{DOCS}{DEV}&writer=key&q=plan").status_code == 400


def test_the_page_reads_its_facets_from_the_url_and_keeps_them_in_its_links(
    owner: Any, mixed: Session
) -> None:
    url = "/projects/acme/development/resources/notes/"
    html = html_of(owner.get(f"{url}?q=plan&writer=owner&agentWrites=enabled"))
    assert ">old<" in html
    assert ">plan<" in html
    assert "frozen-plan" not in html
    assert "keyed" not in html
    # Sort links and the facet controls keep the view; the total reads the filter form.
    assert "sort=id&amp;q=plan&amp;agentWrites=enabled&amp;writer=owner" in html
    assert 'hx-include="#document-filter"' in html
    assert '<option value="owner" selected>' in html
    total = html_of(
        owner.get(f"{url}total/?q=plan&writer=owner&agentWrites=enabled", HTTP_HX_REQUEST="true")
    )
    assert total == "2 of 6 documents"


def test_the_page_says_which_facet_does_not_parse_and_lists_nothing(
    owner: Any, mixed: Session
) -> None:
    html = html_of(owner.get("/projects/acme/development/resources/notes/?sizeMin=lots"))
    assert 'role="alert"' in html
    assert "sizeMin" in html
    assert "frozen-plan" not in html


def test_the_filter_pushes_the_url_of_the_fields_in_use(owner: Any, mixed: Session) -> None:
    url = "/projects/acme/development/resources/notes/"
    # The filter form sends every field, the empty ones too.
    sent = "q=plan&agentWrites=&writer=owner&agent=&session=&key=&updatedFrom=&sizeMin="
    response = owner.get(f"{url}?{sent}", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert response["HX-Push-Url"] == f"{url}?q=plan&writer=owner"
    assert ">plan<" in html_of(response)
    cleared = owner.get(f"{url}?q=&writer=", HTTP_HX_REQUEST="true")
    assert cleared["HX-Push-Url"] == url
    by_id = owner.get(f"{url}?sort=id&q=&writer=", HTTP_HX_REQUEST="true")
    assert by_id["HX-Push-Url"] == f"{url}?sort=id"
