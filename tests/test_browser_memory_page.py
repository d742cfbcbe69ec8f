"""The Memory page in a real browser (the system Chromium, driven by Playwright), against a
live server: the scenarios of the owner, of a conflict between two editors, of a support user,
and of an export. The tests also take the screenshots shown in docs/memory-page.md."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model

from memoryadmin.memory.models import Document, Project, Resource
from memoryadmin.web.services.roles import role_grant
from tests.helpers import BROWSER_TESTS, PASSWORD, shoot

pytestmark = BROWSER_TESTS


def test_owner_logs_in_filters_opens_and_edits_a_document(
    open_page: Any, used_memory: Resource
) -> None:
    from playwright.sync_api import expect

    page = open_page("olivia", through_form=True)
    expect(page.get_by_role("heading", name="Memory")).to_be_visible()
    expect(page.get_by_role("row", name="archive")).to_contain_text("retired")
    shoot(page, "inventory")

    page.get_by_role("link", name="notes", exact=True).click()
    rows = page.locator("#document-rows tr")
    expect(rows).to_have_count(4)
    shoot(page, "documents")
    page.get_by_label("Filter by id or title").press_sequentially("works", delay=40)
    expect(rows).to_have_count(2)  # workshop (id prefix), workspace-setup (id prefix)
    expect(page).to_have_url("/projects/acme/development/resources/notes/?q=works")
    expect(page.get_by_label("Filter by id or title")).to_be_focused()
    page.get_by_label("Filter by id or title").fill("refunds")
    expect(rows).to_have_count(1)  # the incident, by its title
    page.get_by_label("Filter by id or title").fill("workshop")
    expect(rows).to_have_count(1)

    page.get_by_role("link", name="workshop").click()
    expect(page.get_by_role("heading", name="Workshop notes")).to_be_visible()
    expect(page.locator("pre.document-text")).to_have_text(
        "Exercises must run on Node.js 22.\nNo paid external services for the demo.\n"
    )
    shoot(page, "document", full_page=True)

    page.get_by_role("link", name="Edit", exact=True).click()
    text = page.get_by_label("Text", exact=True)
    text.fill("Exercises must run on Node.js 22.\nTwo paid services are fine: ✓\n")
    expect(page.locator("[data-bytes-for=id_text]")).to_have_text("66")
    shoot(page, "edit")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("Saved workshop")
    expect(page.locator("pre.document-text")).to_contain_text("Two paid services are fine: ✓")
    document = used_memory.documents.get(doc_id="workshop")
    assert document.text == "Exercises must run on Node.js 22.\nTwo paid services are fine: ✓\n"
    assert document.bytes == 66
    assert document.versions.count() == 2

    page.get_by_role("link", name="Compare with current").click()
    expect(page.locator("#version-diff table.diff tr.added")).to_contain_text("Two paid")
    expect(page.locator("#diff-title")).to_be_focused()
    shoot(page, "version-diff", full_page=True)

    page.get_by_role("link", name="Audit log", exact=True).first.click()
    expect(page.get_by_role("cell", name="user:olivia")).to_be_visible()
    shoot(page, "audit")
    page.get_by_role("link", name="Production").click()
    expect(page.get_by_role("note")).to_contain_text("Production")
    shoot(page, "production")
    assert page.js_errors == []


def test_a_conflicting_save_shows_both_texts_and_the_edit_is_reapplied(
    open_page: Any, used_memory: Resource, project: Project
) -> None:
    from playwright.sync_api import expect

    get_user_model().objects.create_user(username="otto", password=PASSWORD)
    role_grant(username="otto", project_id="acme", role="owner", actor="test")
    edit_url = "/projects/acme/development/resources/notes/documents/workshop/edit/"

    first = open_page("olivia", edit_url)
    first.get_by_label("Text", exact=True).fill(
        "Exercises must run on Node.js 22 or newer.\nNo paid external services for the demo.\n"
    )

    second = open_page("otto", edit_url)
    second.get_by_label("Text", exact=True).fill(
        "Exercises must run on Node.js 22.\nNo paid external services for the demo.\n"
        "Bring a laptop.\n"
    )
    second.get_by_role("button", name="Save").click()
    expect(second.get_by_role("status")).to_contain_text("Saved workshop")
    theirs = used_memory.documents.get(doc_id="workshop")

    first.get_by_role("button", name="Save").click()
    expect(first.get_by_role("heading", name="Someone saved this document")).to_be_focused()
    # Their change and yours, each against the text both started from, then the result.
    theirs_diff = first.locator("section.conflict-part").nth(0)
    expect(theirs_diff.get_by_role("heading")).to_have_text("1. Their change, saved meanwhile")
    expect(theirs_diff.locator("tr.added")).to_contain_text(["Bring a laptop."])
    expect(theirs_diff.locator("tr.removed")).to_have_count(0)
    mine_diff = first.locator("section.conflict-part").nth(1)
    expect(mine_diff.locator("tr.added")).to_contain_text(["22 or newer"])
    expect(first.get_by_label("Result offered to save")).to_contain_text("Bring a laptop.")
    expect(first.get_by_label("Current text")).to_contain_text("Bring a laptop.")
    expect(first.get_by_label("Your text")).to_contain_text("22 or newer")
    assert used_memory.documents.get(doc_id="workshop").revision == theirs.revision
    shoot(first, "conflict", full_page=True)

    # The two edits touch different lines: the form offers both, on the new revision.
    expect(first.get_by_label("Text", exact=True)).to_have_value(
        "Exercises must run on Node.js 22 or newer.\nNo paid external services for the demo.\n"
        "Bring a laptop.\n"
    )
    first.get_by_role("button", name="Save the result").click()
    expect(first.get_by_role("status")).to_contain_text("Saved workshop")
    document = used_memory.documents.get(doc_id="workshop")
    assert document.text == (
        "Exercises must run on Node.js 22 or newer.\nNo paid external services for the demo.\n"
        "Bring a laptop.\n"
    )
    assert [v.text.count("\n") for v in document.versions.order_by("id")] == [2, 3, 3]
    assert first.js_errors == []


def test_support_freezes_a_document_and_may_not_edit_or_delete_it(
    open_page: Any, used_memory: Resource
) -> None:
    from playwright.sync_api import expect

    document_url = "/projects/acme/development/resources/notes/documents/workshop/"
    page = open_page("sam", document_url)
    expect(page.get_by_role("link", name="Edit", exact=True)).to_have_count(0)
    expect(page.get_by_role("link", name="Delete…")).to_have_count(0)

    page.get_by_label("Agents cannot write").check()
    page.get_by_role("button", name="Apply").click()
    confirm = page.get_by_role("button", name="Freeze agent writes")
    expect(confirm).to_be_focused()  # the confirmation asks first
    shoot(page, "freeze")
    page.keyboard.press("Enter")
    expect(page.get_by_role("status")).to_contain_text("Frozen")
    expect(page.get_by_role("status")).to_be_focused()  # where the action's outcome is told
    expect(page.locator("h1 + .badge.frozen")).to_be_visible()
    document = used_memory.documents.get(doc_id="workshop")
    assert document.agent_writes is False

    response = page.goto(document_url + "edit/")
    assert response.status == 403
    expect(page.get_by_role("alert")).to_contain_text("The support role may not create or edit")

    # Forged requests, with a valid session and CSRF token: refused, nothing changes.
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    headers = {"X-CSRFToken": token}
    edit = page.request.post(
        document_url + "edit/",
        form={"revision": document.revision, "title": "Forged", "text": "forged"},
        headers=headers,
    )
    delete = page.request.post(
        document_url + "delete/",
        form={"revision": document.revision, "confirm_id": "workshop"},
        headers=headers,
    )
    assert (edit.status, delete.status) == (403, 403)
    after = used_memory.documents.get(doc_id="workshop")
    assert (after.revision, after.text, after.deleted) == (document.revision, document.text, False)
    assert page.js_errors == []


def test_export_downloads_a_zip_of_every_document_and_a_manifest(
    open_page: Any, used_memory: Resource
) -> None:
    from playwright.sync_api import expect

    page = open_page("olivia")
    page.get_by_role("link", name="Export").click()
    expect(page.get_by_role("checkbox", name="notes")).to_be_checked()
    shoot(page, "export")
    with page.expect_download() as info:
        page.get_by_role("button", name="Download zip").click()
    download = info.value
    assert download.suggested_filename.startswith("memory-acme-development-")
    archive = zipfile.ZipFile(io.BytesIO(Path(download.path()).read_bytes()))
    files = sorted(name for name in archive.namelist() if not name.endswith("/"))
    expected = sorted(
        f"{d.resource.resource_id}/{d.doc_id}.json"
        for d in Document.objects.live()
        .filter(resource__environment="development")
        .select_related("resource")
    )
    assert files == sorted([*expected, "manifest.json"])
    assert len(expected) == 5
    workshop = json.loads(archive.read("notes/workshop.json"))
    assert workshop["text"] == used_memory.documents.get(doc_id="workshop").text
    manifest = json.loads(archive.read("manifest.json"))
    assert manifest["resources"] == ["archive", "kb", "notes"]
    assert manifest["documents"] == 5
    assert page.js_errors == []
