"""Changes through the Memory page: edits with revision checks, conflicts, create, freeze,
delete, restore; every one recorded, and every one refused to roles that may not make it."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from memoryadmin.memory.models import AuditEntry, Document, DocumentVersion, Resource
from memoryadmin.memory.services.documents import document_delete, document_replace
from tests.helpers import People, html_of

pytestmark = pytest.mark.django_db

BASE = "/projects/acme/development"
NOTES = f"{BASE}/resources/notes/"
WORKSHOP = f"{NOTES}documents/workshop/"


@pytest.fixture
def workshop(make_document: Any) -> Document:
    return make_document(
        "workshop", title="Workshop", text="line one\nline two\nline three\n", summary="Sum."
    )


def stored(doc_id: str = "workshop") -> Document:
    return Document.objects.get(doc_id=doc_id)


def edit(client: Client, revision: str, **fields: str) -> Any:
    data = {"revision": revision, "title": "Workshop", "summary": "Sum.", "text": ""}
    data.update(fields)
    return client.post(f"{WORKSHOP}edit/", data)


# Edit


def test_edit_form_carries_the_revision_it_was_loaded_from(
    owner: Client, workshop: Document
) -> None:
    html = html_of(owner.get(f"{WORKSHOP}edit/"))
    assert f'name="revision" value="{workshop.revision}"' in html
    assert 'data-max-bytes="8192"' in html
    assert 'data-bytes-for="id_text">29</output> / 8192 UTF-8 bytes' in html


def test_owner_edit_saves_text_and_summary_as_a_new_version(
    owner: Client, workshop: Document
) -> None:
    response = edit(owner, workshop.revision, text="new text\n", summary="New sum.")
    assert response.status_code == 302
    assert response["Location"] == WORKSHOP
    document = stored()
    assert (document.text, document.summary, document.title) == (
        "new text\n",
        "New sum.",
        "Workshop",
    )
    assert document.revision != workshop.revision
    assert document.writer_kind == "owner"
    version = document.versions.order_by("-id").first()
    assert version is not None
    assert version.action == "replace"
    assert version.text == "new text\n"
    entry = AuditEntry.objects.filter(action="document.replace").get()
    assert entry.actor == "user:olivia"
    assert entry.document_id == "workshop"
    page = owner.get(WORKSHOP).content.decode()
    assert f"Saved workshop (revision {document.revision[:8]})." in page


def test_edit_of_the_title_alone_is_a_patch(owner: Client, workshop: Document) -> None:
    response = edit(owner, workshop.revision, title="Renamed", text=workshop.text)
    assert response.status_code == 302
    document = stored()
    assert document.title == "Renamed"
    assert document.text == workshop.text
    assert list(document.versions.order_by("id").values_list("action", flat=True)) == [
        "create",
        "patch",
    ]


def test_edit_of_title_and_text_is_all_or_nothing(owner: Client, workshop: Document) -> None:
    response = edit(owner, workshop.revision, title="Renamed", text="changed")
    assert response.status_code == 302
    document = stored()
    assert (document.title, document.text) == ("Renamed", "changed")
    assert document.versions.count() == 3


def test_edit_without_changes_writes_nothing(owner: Client, workshop: Document) -> None:
    response = edit(owner, workshop.revision, text=workshop.text)
    assert response.status_code == 302
    assert stored().revision == workshop.revision
    assert stored().versions.count() == 1
    assert "Nothing changed" in owner.get(WORKSHOP).content.decode()


def test_edit_turns_browser_line_breaks_into_stored_ones(owner: Client, workshop: Document) -> None:
    edit(owner, workshop.revision, text="a\r\nb\r\n")
    assert stored().text == "a\nb\n"
    assert stored().bytes == 4


def test_edit_over_max_bytes_is_refused_inline(owner: Client, make_document: Any) -> None:
    kb_doc = make_document("tiny", resource=Resource.objects.get(resource_id="kb"), text="ok")
    response = owner.post(
        f"{BASE}/resources/kb/documents/tiny/edit/",
        {"revision": kb_doc.revision, "title": "Tiny", "summary": "", "text": "é" * 40},
    )
    html = response.content.decode()
    assert response.status_code == 422
    assert "text is 80 UTF-8 bytes; this resource allows 64." in html
    assert "é" * 40 in html  # the user's text is kept in the form
    assert stored("tiny").text == "ok"


def test_edit_with_an_empty_title_is_refused_inline(owner: Client, workshop: Document) -> None:
    response = edit(owner, workshop.revision, title="", text="changed")
    assert response.status_code == 422
    assert "This field is required." in response.content.decode()
    assert stored().text == workshop.text


# Conflicts


def someone_else_saves(notes: Resource, workshop: Document, text: str) -> Document:
    return document_replace(
        resource=notes,
        doc_id="workshop",
        expected_revision=workshop.revision,
        text=text,
        actor="key:other",
    )


def test_stale_edit_shows_the_conflict_and_overwrites_nothing(
    owner: Client, workshop: Document, notes: Resource
) -> None:
    theirs = someone_else_saves(notes, workshop, "line one\nline two\nline three\nTHEIRS\n")
    html = html_of(edit(owner, workshop.revision, text="MINE\nline two\nline three\n"), 409)
    assert "Someone saved this document while you were editing" in html
    assert stored().text == theirs.text
    assert stored().revision == theirs.revision
    assert stored().versions.count() == 2
    # Both texts in full, and each change as a diff against the text both started from:
    # their added line is "added" in theirs, never "removed" anywhere.
    assert 'aria-label="Current text">line one\nline two\nline three\nTHEIRS\n</pre>' in html
    assert 'aria-label="Your text">MINE\nline two\nline three\n</pre>' in html
    theirs_part = html.split('id="theirs-title"')[1].split('id="mine-title"')[0]
    mine_part = html.split('id="mine-title"')[1].split('id="result-title"')[0]
    assert re.search(r'<tr class="added">.*?THEIRS', theirs_part, re.S)
    assert '<tr class="removed">' not in theirs_part
    assert re.search(r'<tr class="removed">.*?line one', mine_part, re.S)
    assert re.search(r'<tr class="added">.*?MINE', mine_part, re.S)
    assert "THEIRS" not in mine_part
    assert 'aria-label="Result offered to save">MINE\nline two\nline three\nTHEIRS\n</pre>' in html
    # The retry form sits on the current revision, with both edits combined.
    assert f'name="revision" value="{theirs.revision}"' in html
    assert "MINE\nline two\nline three\nTHEIRS\n</textarea>" in html
    assert "Your changes apply cleanly on top of the current text" in html
    assert ">Save the result</button>" in html
    assert theirs.revision not in html.split("<button")[-1].split("</button>")[0]
    assert "Discard my edit" in html


def test_reapplying_after_a_conflict_saves_on_top_of_the_current_revision(
    owner: Client, workshop: Document, notes: Resource
) -> None:
    theirs = someone_else_saves(notes, workshop, "line one\nline two\nline three\nTHEIRS\n")
    edit(owner, workshop.revision, text="MINE\nline two\nline three\n")
    response = edit(owner, theirs.revision, text="MINE\nline two\nline three\nTHEIRS\n")
    assert response.status_code == 302
    document = stored()
    assert document.text == "MINE\nline two\nline three\nTHEIRS\n"
    assert list(document.versions.order_by("id").values_list("text", flat=True)) == [
        workshop.text,
        theirs.text,
        document.text,
    ]


def test_overlapping_conflict_offers_the_users_own_text(
    owner: Client, workshop: Document, notes: Resource
) -> None:
    theirs = someone_else_saves(notes, workshop, "THEIR FIRST LINE\nline two\nline three\n")
    html = html_of(
        edit(owner, workshop.revision, text="MY FIRST LINE\nline two\nline three\n"), 409
    )
    assert "Your changes overlap the changes saved meanwhile" in html
    assert "MY FIRST LINE\nline two\nline three\n</textarea>" in html
    assert stored().text == theirs.text


def test_conflict_on_a_document_deleted_meanwhile_is_404(
    owner: Client, workshop: Document, notes: Resource
) -> None:
    document_delete(
        resource=notes, doc_id="workshop", expected_revision=workshop.revision, actor="t"
    )
    response = edit(owner, workshop.revision, text="mine")
    assert response.status_code == 404
    assert stored().deleted is True
    assert stored().text == ""


# Create


def test_create_form_creates_a_document(owner: Client, notes: Resource) -> None:
    response = owner.post(
        f"{NOTES}new/",
        {"doc_id": "fresh", "title": "Fresh", "summary": "S", "text": "t\r\nu", "frozen": "on"},
    )
    assert response.status_code == 302
    assert response["Location"] == f"{NOTES}documents/fresh/"
    document = stored("fresh")
    assert (document.title, document.summary, document.text) == ("Fresh", "S", "t\nu")
    assert document.agent_writes is False
    entry = AuditEntry.objects.get(action="document.create", document_id="fresh")
    assert entry.actor == "user:olivia"


def test_create_with_a_used_id_shows_the_error_on_the_id(owner: Client, workshop: Document) -> None:
    html = html_of(
        owner.post(f"{NOTES}new/", {"doc_id": "workshop", "title": "Again", "text": "x"}), 422
    )
    assert (
        'id="id_doc_id_error"><li>The id &#x27;workshop&#x27; is already in use in notes; '
        "choose another one.</li>" in html
    )
    assert 'aria-invalid="true" aria-describedby="id_doc_id_error" id="id_doc_id"' in html
    assert stored().title == "Workshop"


def test_create_with_a_deleted_id_is_refused(
    owner: Client, workshop: Document, notes: Resource
) -> None:
    document_delete(
        resource=notes, doc_id="workshop", expected_revision=workshop.revision, actor="t"
    )
    response = owner.post(f"{NOTES}new/", {"doc_id": "workshop", "title": "Back", "text": "x"})
    assert response.status_code == 422
    assert "belonged to a document that was deleted; ids are never reused" in html_of(response, 422)
    assert stored().deleted is True
    assert stored().title == ""


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"doc_id": "bad id!", "title": "T"}, "Document ids are 1-128 ASCII letters"),
        ({"doc_id": "ok", "title": ""}, "This field is required."),
        ({"doc_id": "ok", "title": "T", "summary": "é" * 121}, "The summary is 242 UTF-8 bytes"),
        ({"doc_id": "ok", "title": "T", "text": "x" * 8193}, "The text is 8193 UTF-8 bytes"),
    ],
)
def test_create_errors_are_shown_inline(
    owner: Client, notes: Resource, fields: dict[str, str], message: str
) -> None:
    html = html_of(owner.post(f"{NOTES}new/", fields), 422)
    assert message in html
    assert "The document was not created" in html
    assert not Document.objects.exists()


def test_create_shows_every_mistake_at_once(owner: Client, workshop: Document) -> None:
    html = html_of(
        owner.post(f"{NOTES}new/", {"doc_id": "workshop", "title": "T", "text": "x" * 8193}), 422
    )
    assert "Correct these 2 mistakes:" in html
    assert "The id &#x27;workshop&#x27; is already in use in notes" in html
    assert "The text is 8193 UTF-8 bytes; this resource allows 8192." in html
    assert stored().title == "Workshop"


# Freeze and unfreeze


@pytest.mark.parametrize("persona", ["owner", "support"])
def test_freeze_and_unfreeze_with_confirmation(
    persona: str, people: People, web_client_for: Callable[[Any], Client], workshop: Document
) -> None:
    client = web_client_for(getattr(people, persona))
    confirm = client.get(f"{WORKSHOP}freeze/")
    assert confirm.status_code == 200
    assert "Freeze agent writes on workshop?" in confirm.content.decode()
    assert stored().agent_writes is True  # asking changes nothing
    response = client.post(f"{WORKSHOP}freeze/")
    assert response.status_code == 302
    assert response["Location"] == WORKSHOP
    assert stored().agent_writes is False
    name = getattr(people, persona).username
    assert AuditEntry.objects.get(action="document.freeze").actor == f"user:{name}"
    response = client.post(f"{WORKSHOP}unfreeze/")
    assert response.status_code == 302
    assert stored().agent_writes is True
    assert AuditEntry.objects.get(action="document.unfreeze").actor == f"user:{name}"


def test_freeze_confirmation_over_htmx_is_a_fragment(support: Client, workshop: Document) -> None:
    response = support.get(f"{WORKSHOP}freeze/", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert "<html" not in html
    assert "Freeze agent writes on workshop?" in html
    assert "autofocus" in html


def test_freeze_wins_even_after_an_edit_made_meanwhile(
    support: Client, workshop: Document, notes: Resource
) -> None:
    support.get(f"{WORKSHOP}freeze/")
    theirs = someone_else_saves(notes, workshop, "changed")
    response = support.post(f"{WORKSHOP}freeze/")
    assert response.status_code == 302
    document = stored()
    assert document.agent_writes is False
    assert document.text == "changed"
    assert document.revision != theirs.revision


def test_freezing_a_frozen_document_changes_nothing(support: Client, workshop: Document) -> None:
    support.post(f"{WORKSHOP}freeze/")
    frozen = stored()
    response = support.post(f"{WORKSHOP}freeze/", follow=True)
    assert "were already frozen" in response.content.decode()
    assert stored().revision == frozen.revision
    assert AuditEntry.objects.filter(action="document.freeze").count() == 1


# Delete


def test_delete_asks_for_the_id_and_says_it_stays_reserved(
    owner: Client, workshop: Document
) -> None:
    confirm = owner.get(f"{WORKSHOP}delete/").content.decode()
    assert "The id stays reserved" in confirm
    assert 'name="confirm_id"' in confirm
    response = owner.post(
        f"{WORKSHOP}delete/", {"revision": workshop.revision, "confirm_id": "worksho"}
    )
    assert response.status_code == 422
    html = response.content.decode()
    assert "Type &#x27;workshop&#x27; exactly" in html
    # The document stays in view and the typed text stays in the field.
    assert "<h1>Workshop</h1>" in html
    assert 'name="confirm_id" type="text"' in html
    assert 'value="worksho" aria-invalid="true"' in html
    assert stored().deleted is False


def test_delete_wipes_the_document_and_keeps_its_id(owner: Client, workshop: Document) -> None:
    response = owner.post(
        f"{WORKSHOP}delete/", {"revision": workshop.revision, "confirm_id": "workshop"}
    )
    assert response.status_code == 302
    assert response["Location"] == NOTES
    document = stored()
    assert document.deleted is True
    assert document.text == ""
    assert document.title == ""
    assert set(DocumentVersion.objects.values_list("text", flat=True)) == {""}
    assert AuditEntry.objects.get(action="document.delete").actor == "user:olivia"
    assert "Its id stays reserved" in owner.get(NOTES).content.decode()


def test_delete_on_a_stale_revision_deletes_nothing(
    owner: Client, workshop: Document, notes: Resource
) -> None:
    someone_else_saves(notes, workshop, "changed")
    response = owner.post(
        f"{WORKSHOP}delete/", {"revision": workshop.revision, "confirm_id": "workshop"}
    )
    assert response.status_code == 409
    assert stored().deleted is False
    assert stored().text == "changed"


# Restore


def test_restore_makes_an_old_version_current_as_an_owner_edit(
    owner: Client, workshop: Document, notes: Resource
) -> None:
    current = document_replace(
        resource=notes,
        doc_id="workshop",
        expected_revision=workshop.revision,
        text="later",
        summary="Later.",
        actor="t",
    )
    response = owner.post(
        f"{WORKSHOP}versions/{workshop.revision}/restore/", {"revision": current.revision}
    )
    assert response.status_code == 302
    document = stored()
    assert (document.text, document.summary) == (workshop.text, "Sum.")
    assert document.revision not in (workshop.revision, current.revision)
    assert document.versions.order_by("-id").first().action == "restore"  # type: ignore[union-attr]
    assert AuditEntry.objects.get(action="document.restore").actor == "user:olivia"


def test_restore_under_a_stale_revision_changes_nothing(
    owner: Client, workshop: Document, notes: Resource
) -> None:
    current = someone_else_saves(notes, workshop, "later")
    response = owner.post(
        f"{WORKSHOP}versions/{workshop.revision}/restore/", {"revision": workshop.revision}
    )
    assert response.status_code == 302
    assert response["Location"] == f"{WORKSHOP}versions/{workshop.revision}/"
    assert stored().revision == current.revision
    assert stored().text == "later"
    assert (
        "changed while you were looking at it" in owner.get(response["Location"]).content.decode()
    )


# Roles are enforced on the server, for forged requests too.


def forged_posts(document: Document) -> dict[str, tuple[str, dict[str, Any]]]:
    revision = document.revision
    return {
        "edit": (f"{WORKSHOP}edit/", {"revision": revision, "title": "X", "text": "forged"}),
        "create": (f"{NOTES}new/", {"doc_id": "forged", "title": "X", "text": "forged"}),
        "delete": (f"{WORKSHOP}delete/", {"revision": revision, "confirm_id": "workshop"}),
        "restore": (f"{WORKSHOP}versions/{revision}/restore/", {"revision": revision}),
        "freeze": (f"{WORKSHOP}freeze/", {"revision": revision}),
        "unfreeze": (f"{WORKSHOP}unfreeze/", {"revision": revision}),
        "export": (f"{BASE}/export/", {"resources": ["notes"]}),
    }


REFUSED = [
    ("support", "edit"),
    ("support", "create"),
    ("support", "delete"),
    ("support", "restore"),
    ("viewer", "edit"),
    ("viewer", "create"),
    ("viewer", "delete"),
    ("viewer", "restore"),
    ("viewer", "freeze"),
    ("viewer", "unfreeze"),
    ("viewer", "export"),
]


@pytest.mark.parametrize(("persona", "action"), REFUSED)
def test_forged_posts_of_a_role_without_the_permission_are_403_and_change_nothing(
    persona: str,
    action: str,
    people: People,
    web_client_for: Callable[[Any], Client],
    workshop: Document,
) -> None:
    url, data = forged_posts(workshop)[action]
    audit_before = AuditEntry.objects.count()
    response = web_client_for(getattr(people, persona)).post(url, data)
    assert response.status_code == 403
    assert b"may not" in response.content
    document = stored()
    assert document.revision == workshop.revision
    assert document.text == workshop.text
    assert document.agent_writes is True
    assert document.deleted is False
    assert Document.objects.count() == 1
    assert AuditEntry.objects.count() == audit_before


# Restore has no form page of its own: it is a button on the version page.
@pytest.mark.parametrize(("persona", "action"), [r for r in REFUSED if r[1] != "restore"])
def test_forms_of_a_role_without_the_permission_are_403(
    persona: str,
    action: str,
    people: People,
    web_client_for: Callable[[Any], Client],
    workshop: Document,
) -> None:
    url, _ = forged_posts(workshop)[action]
    response = web_client_for(getattr(people, persona)).get(url)
    assert response.status_code == 403


@pytest.mark.parametrize("action", ["edit", "create", "delete", "restore", "freeze", "export"])
def test_forged_posts_from_outside_the_project_are_404(
    action: str, people: People, web_client_for: Callable[[Any], Client], workshop: Document
) -> None:
    url, data = forged_posts(workshop)[action]
    response = web_client_for(people.outsider).post(url, data)
    assert response.status_code == 404
    assert stored().revision == workshop.revision
    assert Document.objects.count() == 1


def test_posts_without_a_csrf_token_are_refused(people: People, workshop: Document) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(people.owner)
    response = client.post(f"{WORKSHOP}edit/", {"revision": workshop.revision, "title": "X"})
    assert response.status_code == 403
    assert stored().revision == workshop.revision


def test_the_csrf_token_reaches_htmx_through_hx_headers(owner: Client, workshop: Document) -> None:
    html = owner.get(WORKSHOP).content.decode()
    assert re.search(r"<body [^>]*hx-headers='\{\"X-CSRFToken\": \"[A-Za-z0-9]+\"\}'", html)
