"""The Memory page in a real browser (the system Chromium, driven by Playwright), against a
live server: the scenarios of the owner, of a conflict between two editors, of a support user,
and of an export. The tests also save the screenshots shown in docs/memory-page.md."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from memoryadmin.memory.models import Deployment, Document, Project, Resource
from memoryadmin.memory.services.deployments import deployment_create, deployment_promote
from memoryadmin.memory.services.documents import Writer, document_replace
from memoryadmin.web.services.roles import role_grant
from tests.conftest import PASSWORD, People

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "screenshots"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="needs Chromium at /usr/bin/chromium (apt-get install chromium)",
    ),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop running in this thread while
    # the browser is open; the ORM calls of the tests (and of the database
    # flush between them) are still plain synchronous code.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=ARGS, headless=True
            )
            yield browser
            browser.close()


@pytest.fixture
def contexts(browser: Any) -> Iterator[list[Any]]:
    opened: list[Any] = []
    yield opened
    for context in opened:
        context.close()


@pytest.fixture
def open_page(browser: Any, contexts: list[Any], live_server: Any) -> Any:
    """A page in a fresh browser context (its own cookies), logged in as `username`."""

    def make(username: str, **options: Any) -> Any:
        context = browser.new_context(
            base_url=live_server.url, viewport={"width": 1280, "height": 860}, **options
        )
        context.set_default_timeout(10_000)
        contexts.append(context)
        page = context.new_page()
        # Script errors and console errors such as CSP violations; not the
        # console's note about 4xx pages, which some scenarios expect.
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("console", lambda message: _console_error(message, errors))
        page.js_errors = errors
        page.goto("/")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url("**/projects/acme/development/")
        return page

    return make


def _console_error(message: Any, errors: list[str]) -> None:
    if message.type == "error" and not message.text.startswith("Failed to load resource"):
        errors.append(message.text)


def shoot(page: Any, name: str, *, full_page: bool = False) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=full_page)


@pytest.fixture
def memory(project: Project, people: People, notes: Resource, make_document: Any) -> Resource:
    """A project that looks used: documents by owners and agents, a frozen one, a retired
    resource."""
    make_document(
        "workshop",
        title="Workshop notes",
        text="Exercises must run on Node.js 22.\nNo paid external services for the demo.\n",
        summary="Workshop runtime requirements.",
    )
    onboarding = make_document(
        "onboarding",
        title="Onboarding checklist",
        text="1. Create an API key.\n2. Deploy the agent.\n",
        summary="Steps for a new team member.",
    )
    document_replace(
        resource=notes,
        doc_id="onboarding",
        expected_revision=onboarding.revision,
        text="1. Create an API key.\n2. Deploy the agent.\n3. Bind notes to the session.\n",
        actor="agent",
        writer=Writer(kind="agent", session_id="sess_4f2a9c"),
    )
    make_document(
        "workspace-setup",
        title="Workspace set-up",
        text="Clone the repository, then run make run.\n",
        summary="Local environment.",
    )
    make_document(
        "incident-0412",
        title="Incident 04-12: duplicate refunds",
        text="An agent promised two refunds. Frozen while support reviews it.\n",
        summary="Under review.",
        agent_writes=False,
    )
    kb = Resource.objects.get(resource_id="kb", environment="development")
    make_document("refunds", resource=kb, title="Refund policy", text="30 days.")
    deployment_create(
        project=project,
        agent="archivist",
        memory=[{"id": "archive", "description": "Old decisions.", "provider": {}}],
        promote="development",
        actor="test",
    )
    # A newer archivist build declares nothing: "archive" is retired.
    deployment_create(
        project=project, agent="archivist", memory=[], promote="development", actor="test"
    )
    deployment_promote(
        deployment=Deployment.objects.get(project=project, agent="support-bot"),
        environment="production",
        actor="test",
    )
    production_notes = Resource.objects.get(resource_id="notes", environment="production")
    make_document("workshop", resource=production_notes, title="Workshop notes", text="Live.")
    return notes


def test_owner_logs_in_filters_opens_and_edits_a_document(open_page: Any, memory: Resource) -> None:
    from playwright.sync_api import expect

    page = open_page("olivia")
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
    document = memory.documents.get(doc_id="workshop")
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
    open_page: Any, memory: Resource, project: Project
) -> None:
    from playwright.sync_api import expect

    get_user_model().objects.create_user(username="otto", password=PASSWORD)
    role_grant(username="otto", project_id="acme", role="owner", actor="test")
    edit_url = "/projects/acme/development/resources/notes/documents/workshop/edit/"

    first = open_page("olivia")
    first.goto(edit_url)
    first.get_by_label("Text", exact=True).fill(
        "Exercises must run on Node.js 22 or newer.\nNo paid external services for the demo.\n"
    )

    second = open_page("otto")
    second.goto(edit_url)
    second.get_by_label("Text", exact=True).fill(
        "Exercises must run on Node.js 22.\nNo paid external services for the demo.\n"
        "Bring a laptop.\n"
    )
    second.get_by_role("button", name="Save").click()
    expect(second.get_by_role("status")).to_contain_text("Saved workshop")
    theirs = memory.documents.get(doc_id="workshop")

    first.get_by_role("button", name="Save").click()
    expect(first.get_by_role("heading", name="Someone saved this document")).to_be_focused()
    expect(first.get_by_label("Current text")).to_contain_text("Bring a laptop.")
    expect(first.get_by_label("Your text")).to_contain_text("22 or newer")
    assert memory.documents.get(doc_id="workshop").revision == theirs.revision
    shoot(first, "conflict", full_page=True)

    # The two edits touch different lines: the form offers both, on the new revision.
    expect(first.get_by_label("Text", exact=True)).to_have_value(
        "Exercises must run on Node.js 22 or newer.\nNo paid external services for the demo.\n"
        "Bring a laptop.\n"
    )
    first.get_by_role("button", name=f"Save on top of revision {theirs.revision}").click()
    expect(first.get_by_role("status")).to_contain_text("Saved workshop")
    document = memory.documents.get(doc_id="workshop")
    assert document.text == (
        "Exercises must run on Node.js 22 or newer.\nNo paid external services for the demo.\n"
        "Bring a laptop.\n"
    )
    assert [v.text.count("\n") for v in document.versions.order_by("id")] == [2, 3, 3]
    assert first.js_errors == []


def test_support_freezes_a_document_and_may_not_edit_or_delete_it(
    open_page: Any, memory: Resource
) -> None:
    from playwright.sync_api import expect

    document_url = "/projects/acme/development/resources/notes/documents/workshop/"
    page = open_page("sam")
    page.goto(document_url)
    expect(page.get_by_role("link", name="Edit", exact=True)).to_have_count(0)
    expect(page.get_by_role("link", name="Delete…")).to_have_count(0)

    page.get_by_role("link", name="Freeze agent writes…").click()
    confirm = page.get_by_role("button", name="Freeze agent writes")
    expect(confirm).to_be_focused()  # focus follows the swapped-in confirmation
    shoot(page, "freeze")
    page.keyboard.press("Enter")
    expect(page.get_by_role("status")).to_contain_text("Frozen")
    expect(page.locator("h1 + .badge.frozen")).to_be_visible()
    document = memory.documents.get(doc_id="workshop")
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
    after = memory.documents.get(doc_id="workshop")
    assert (after.revision, after.text, after.deleted) == (document.revision, document.text, False)
    assert page.js_errors == []


def test_export_downloads_a_zip_of_every_document_and_a_manifest(
    open_page: Any, memory: Resource
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
    assert workshop["text"] == memory.documents.get(doc_id="workshop").text
    manifest = json.loads(archive.read("manifest.json"))
    assert manifest["resources"] == ["archive", "kb", "notes"]
    assert manifest["documents"] == 5
    assert page.js_errors == []
