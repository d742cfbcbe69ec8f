"""Bulk actions on every document the list's filters keep ("Select all matching"): the
server reads the documents from the filters, the confirmation names their count, each
gets its own audit entry, and an action is bounded."""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import pytest
from django.test import Client

from memoryadmin.memory.models import AuditEntry, Document
from memoryadmin.web.services import bulk
from tests.helpers import DEV, DOCS, form_posted, html_of, streamed

URL = "/projects/acme/development/resources/notes/bulk/"


@pytest.fixture
def sixty(make_document: Any) -> None:
    """60 "plan-" documents (more than a page), 5 of them large, and two others."""
    for i in range(60):
        make_document(f"plan-{i:02d}", text="x" * (500 if i < 5 else 10))
    make_document("other", text="x" * 500)
    make_document("frozen", agent_writes=False)


def test_freeze_all_matching_names_the_count_then_freezes_each_from_the_filter(
    support: Client, sixty: None
) -> None:
    # No document list is posted: the filter says which.
    confirm = html_of(support.post(URL, {"action": "freeze", "all": "matching", "q": "plan"}))
    assert "Freeze 60 matching documents in notes?" in confirm
    assert '<input type="hidden" name="count" value="60">' in confirm
    assert "<code>q=plan</code>" in confirm
    assert not Document.objects.filter(doc_id__startswith="plan", agent_writes=False).exists()
    done = support.post(URL, form_posted(confirm, URL), follow=True)
    assert "Froze 60 documents." in done.content.decode()
    assert Document.objects.filter(doc_id__startswith="plan", agent_writes=False).count() == 60
    assert Document.objects.get(doc_id="other").agent_writes is True
    entries = AuditEntry.objects.filter(action="document.freeze", actor="user:sam")
    assert sorted(entries.values_list("document_id", flat=True)) == [
        f"plan-{i:02d}" for i in range(60)
    ]


def test_the_facets_choose_too_and_ticked_rows_do_not_count(owner: Client, sixty: None) -> None:
    posted = {"action": "delete", "all": "matching", "sizeMin": "100", "doc": ["frozen:x"]}
    confirm = html_of(owner.post(URL, posted))
    assert "Delete 6 matching documents in notes?" in confirm
    owner.post(URL, {**posted, **form_posted(confirm, URL)})
    deleted = Document.objects.filter(deleted=True).values_list("doc_id", flat=True)
    assert sorted(deleted) == ["other", *[f"plan-{i:02d}" for i in range(5)]]
    assert AuditEntry.objects.filter(action="document.delete").count() == 6


def test_a_confirmation_holds_for_the_documents_it_named_only(
    support: Client, sixty: None, make_document: Any
) -> None:
    confirm = html_of(support.post(URL, {"action": "freeze", "all": "matching", "q": "plan"}))
    make_document("plan-new")
    html = html_of(support.post(URL, form_posted(confirm, URL)))
    assert "61 match now. Confirm again." in html
    assert not Document.objects.filter(agent_writes=False).exclude(doc_id="frozen").exists()


def test_all_matching_is_bounded_and_says_so(
    support: Client, sixty: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk, "BULK_MATCHING_MAX", 59)
    response = support.post(
        URL,
        {"action": "freeze", "all": "matching", "q": "plan", "count": "60", "confirm": "yes"},
    )
    html = html_of(response, 400)
    assert "More than 59 documents match" in html
    assert "Narrow the filters" in html
    assert not Document.objects.filter(agent_writes=False).exclude(doc_id="frozen").exists()


def test_nothing_matching_or_a_bad_facet_changes_nothing(support: Client, sixty: None) -> None:
    empty = support.post(URL, {"action": "freeze", "all": "matching", "q": "zzz"})
    assert "No document matches the filters." in html_of(empty, 400)
    bad = support.post(URL, {"action": "freeze", "all": "matching", "sizeMin": "lots"})
    assert "sizeMin" in html_of(bad, 400)
    assert not AuditEntry.objects.filter(action="document.freeze").exists()


def test_export_all_matching_downloads_them(support: Client, sixty: None) -> None:
    response = support.post(URL, {"action": "export", "all": "matching", "sizeMin": "100"})
    assert response.status_code == 200
    archive = zipfile.ZipFile(io.BytesIO(streamed(response)))
    names = sorted(n for n in archive.namelist() if n.endswith(".json") and "/" in n)
    assert names == ["notes/other.json", *[f"notes/plan-{i:02d}.json" for i in range(5)]]
    assert json.loads(archive.read("manifest.json"))


def test_a_viewer_may_not(web: Any, sixty: None) -> None:
    response = web("viewer").post(URL, {"action": "freeze", "all": "matching", "q": "plan"})
    assert response.status_code == 403


def test_the_list_offers_it_with_the_filters(support: Client, sixty: None) -> None:
    html = html_of(support.get("/projects/acme/development/resources/notes/?q=plan&sizeMin=100"))
    assert '<input type="hidden" name="q" value="plan">' in html
    assert '<input type="hidden" name="sizeMin" value="100">' in html
    assert 'name="all" value="matching"' in html


def test_a_viewer_is_not_offered_it(web: Any, sixty: None) -> None:
    html = html_of(web("viewer").get("/projects/acme/development/resources/notes/"))
    assert 'name="all"' not in html


def test_an_action_comes_back_to_the_list_as_it_was(support: Client, sixty: None) -> None:
    """The list's sort and filter ride in `back` through the confirmation to the redirect;
    only the list's own parameters are kept, and the way back is always this list."""
    listed = html_of(support.get("/projects/acme/development/resources/notes/?sort=id&q=plan"))
    assert '<input type="hidden" name="back" value="sort=id&amp;q=plan">' in listed
    plan = Document.objects.get(doc_id="plan-07")
    picked = {"action": "freeze", "doc": f"plan-07:{plan.revision}"}
    confirm = html_of(support.post(URL, {**picked, "back": "sort=id&q=plan"}))
    assert '<input type="hidden" name="back" value="sort=id&amp;q=plan">' in confirm
    assert 'href="/projects/acme/development/resources/notes/?sort=id&amp;q=plan"' in confirm
    done = support.post(URL, {**picked, "confirm": "yes", "back": "sort=id&q=plan"})
    assert done.status_code == 302
    assert done["Location"] == "/projects/acme/development/resources/notes/?sort=id&q=plan"
    assert Document.objects.get(doc_id="plan-07").agent_writes is False
    # Anything else is dropped: another site, a cursor, an unknown sort or facet.
    for back in ("https://evil.example/", "//evil.example", "next=/x&cursor=abc&sort=evil"):
        again = support.post(URL, {**picked, "confirm": "yes", "back": back})
        assert again["Location"] == "/projects/acme/development/resources/notes/"
    # Nothing ticked: told so on the list as it was.
    empty = support.post(URL, {"action": "freeze", "back": "sizeMin=100"})
    assert empty["Location"] == "/projects/acme/development/resources/notes/?sizeMin=100"


def test_a_delete_of_all_matching_never_deletes_a_document_written_after_its_confirmation(
    owner: Client, api: Any, make_document: Any
) -> None:
    """The confirmation says a document changed since it was selected is not deleted: one
    written through the API between the confirmation and its button is asked again,
    and nothing is deleted."""
    for i in range(3):
        make_document(f"plan-{i}", text="draft")
    confirm = html_of(owner.post(URL, {"action": "delete", "all": "matching", "q": "plan"}))
    assert "Delete 3 matching documents in notes?" in confirm
    seen = Document.objects.get(doc_id="plan-1").revision
    put = api.put(
        f"{DOCS}/plan-1{DEV}",
        data=json.dumps({"text": "written meanwhile"}),
        content_type="application/json",
        HTTP_IF_MATCH=f'"{seen}"',
    )
    assert put.status_code == 200
    again = html_of(owner.post(URL, form_posted(confirm, URL)))
    assert "The matching documents changed since you confirmed" in again
    assert "Delete 3 matching documents in notes?" in again
    assert not Document.objects.filter(deleted=True).exists()
    assert Document.objects.get(doc_id="plan-1").text == "written meanwhile"
    assert not AuditEntry.objects.filter(action="document.delete").exists()
    # Confirmed again as it reads now, each is deleted, the write meanwhile too.
    owner.post(URL, form_posted(again, URL))
    assert Document.objects.filter(doc_id__startswith="plan", deleted=True).count() == 3
    assert AuditEntry.objects.filter(action="document.delete").count() == 3
