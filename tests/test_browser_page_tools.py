"""The tools of the Memory page in a real browser (the system Chromium, driven by
Playwright), for an owner, a support engineer and a viewer, at a laptop's width and at a
phone's: the document list's facets, selecting every matching document for a bulk
action, importing an export, what an agent sees, and webhook tests and deliveries."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from memoryadmin.memory.models import AuditEntry, Document, Resource
from memoryadmin.runner.jobs import job_run
from memoryadmin.runner.models import Job
from memoryadmin.webhooks.models import Delivery
from memoryadmin.webhooks.services import endpoint_create
from tests.helpers import BROWSER_TESTS, Receiver, serve

pytestmark = BROWSER_TESTS

NOTES = "/projects/acme/development/resources/notes/"
WIDTHS = {"laptop": {"width": 1280, "height": 860}, "phone": {"width": 390, "height": 844}}


def fits(page: Any) -> None:
    """Nothing wider than the screen: no sideways scrolling of the page."""
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("username", ["olivia", "sam", "vera"])
def test_facets_narrow_the_list_and_a_shared_link_reproduces_the_view(
    open_page: Any, used_memory: Resource, username: str, width: str
) -> None:
    from playwright.sync_api import expect

    page = open_page(username, NOTES, viewport=WIDTHS[width])
    rows = page.locator("#document-rows tr")
    expect(rows).to_have_count(4)
    page.get_by_text("More filters").click()
    page.get_by_label("Agent writes").select_option("disabled")
    page.get_by_role("button", name="Apply filters").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("incident-0412")
    expect(page.locator("[data-total]")).to_have_text(re.compile(r"^1 of \d+ documents$"))
    assert "agentWrites=disabled" in page.url
    fits(page)

    # Combined with the text filter and another facet, all in the URL.
    page.get_by_label("Agent writes").select_option("")
    page.get_by_label("Last writer").select_option("agent")
    page.get_by_role("button", name="Apply filters").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("onboarding")
    expect(page.locator("[data-total]")).to_have_text(re.compile(r"^1 of \d+ documents$"))
    # Typed: htmx filters the rows with the facets of the form and pushes the URL.
    page.get_by_label("Filter by id or title").press_sequentially("work", delay=20)
    expect(rows.first).to_contain_text("No documents match")
    expect(page).to_have_url(re.compile(r"q=work"))
    shared = page.url
    assert "writer=agent" in shared
    assert "q=work" in shared

    # Someone else opens the link: the same view.
    other = open_page("vera" if username != "vera" else "sam", viewport=WIDTHS[width])
    other.goto(shared)
    expect(other.locator("#document-rows tr")).to_have_count(1)
    expect(other.get_by_label("Last writer")).to_have_value("agent")
    expect(other.get_by_label("Filter by id or title")).to_have_value("work")
    expect(other.locator("[data-total]")).to_have_text(re.compile(r"^0 of \d+ documents$"))
    other.get_by_role("link", name="Clear").click()
    expect(other.locator("#document-rows tr")).to_have_count(4)
    fits(other)
    assert page.js_errors == []
    assert other.js_errors == []


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("username", ["olivia", "sam"])
def test_select_all_matching_freezes_every_match_beyond_the_page(
    open_page: Any, used_memory: Resource, make_document: Any, username: str, width: str
) -> None:
    from playwright.sync_api import expect

    for i in range(55):
        make_document(f"batch-{i:02d}", title=f"Batch {i}")
    page = open_page(username, NOTES, viewport=WIDTHS[width])
    # Typed, not submitted: htmx filters the rows; the bulk form sends what is typed.
    page.get_by_label("Filter by id or title").press_sequentially("batch", delay=20)
    # The rows of what is typed whole: on a slow machine a pause between two keys sends
    # (and pushes) the filter of the letters before it, whose rows are the same here.
    expect(page).to_have_url(re.compile(r"/resources/notes/\?q=batch$"))
    expect(page.locator("#document-rows tr.load-more")).to_have_count(1)
    expect(page.locator("#document-rows tr:not(.load-more)")).to_have_count(50)
    expect(page.locator("[data-total]")).to_have_text(re.compile(r"^55 of \d+ documents$"))
    page.get_by_label("Select all matching").check()
    page.get_by_role("button", name="Freeze selected", exact=True).click()
    expect(
        page.get_by_role("heading", name="Freeze 55 matching documents in notes?")
    ).to_be_visible()
    fits(page)
    page.get_by_role("button", name="Freeze 55 documents").click()
    expect(page.get_by_text("Froze 55 documents.")).to_be_visible()
    # Back on the list as it was: the filter typed (pushed to the address by htmx) stays.
    assert page.url.endswith("/resources/notes/?q=batch")
    expect(page.get_by_label("Filter by id or title")).to_have_value("batch")
    frozen = used_memory.documents.filter(doc_id__startswith="batch-", agent_writes=False)
    assert frozen.count() == 55
    assert used_memory.documents.get(doc_id="workshop").agent_writes is True
    entries = AuditEntry.objects.filter(action="document.freeze", actor=f"user:{username}")
    assert entries.count() == 55
    assert page.js_errors == []


def test_a_viewer_has_no_bulk_actions(open_page: Any, used_memory: Resource) -> None:
    from playwright.sync_api import expect

    page = open_page("vera", NOTES)
    expect(page.locator("#document-rows tr")).to_have_count(4)
    expect(page.get_by_label("Select all matching")).to_have_count(0)
    expect(page.get_by_role("button", name="Freeze selected", exact=True)).to_have_count(0)


@pytest.mark.parametrize("width", WIDTHS)
def test_owner_imports_an_export_after_its_dry_run(
    open_page: Any, used_memory: Resource, width: str, settings: Any, tmp_path: Any
) -> None:
    from playwright.sync_api import expect

    settings.VAR_DIR = tmp_path
    page = open_page("olivia", "/projects/acme/development/export/", viewport=WIDTHS[width])
    with page.expect_download() as info:
        page.get_by_role("button", name="Download zip").click()
    exported = info.value.path()

    # Into production, which holds notes/workshop only.
    page.goto("/projects/acme/production/export/")
    page.get_by_role("link", name="Import an export…").click()
    page.get_by_label("Export zip").set_input_files(exported)
    page.get_by_role("button", name="Upload and check").click()
    report = page.locator(".import-report")
    expect(report.get_by_role("heading")).to_contain_text("would create 4 documents")
    expect(report.locator('[data-count="conflicts"]')).to_have_text("1")
    expect(report.get_by_role("row", name="workshop")).to_contain_text("conflict")
    fits(page)
    production = Document.objects.filter(resource__environment="production")
    assert production.count() == 1  # the dry run created nothing
    report.get_by_role("button", name="Import 4 documents").click()
    expect(page.get_by_text("Imported: 4 created, 1 conflicts")).to_be_visible()
    assert sorted(production.values_list("doc_id", flat=True)) == [
        "incident-0412",
        "onboarding",
        "refunds",
        "workshop",
        "workspace-setup",
    ]
    page.reload()  # after a redirect: nothing is imported again
    assert production.count() == 5
    assert page.js_errors == []


@pytest.mark.parametrize("username", ["sam", "vera"])
def test_support_and_viewers_are_not_offered_import(
    open_page: Any, used_memory: Resource, username: str
) -> None:
    from playwright.sync_api import expect

    page = open_page(username, "/projects/acme/development/export/")
    expect(page.get_by_role("link", name="Import an export…")).to_have_count(0)
    response = page.goto("/projects/acme/development/import/")
    assert response is not None
    assert response.status == 403


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from serve(Receiver())


@pytest.mark.parametrize("width", WIDTHS)
def test_owner_sends_a_test_event_and_reads_what_was_sent_and_answered(
    open_page: Any, used_memory: Resource, receiver: Receiver, width: str, settings: Any
) -> None:
    from playwright.sync_api import expect

    settings.MEMORYADMIN_WEBHOOK_BACKOFF_SECONDS = 600
    endpoint, _ = endpoint_create(
        project=used_memory.project, url=receiver.url, events=["document.created"], actor="test"
    )
    receiver.statuses = [503, 200]
    receiver.reply_body = b"busy, try later"
    page = open_page(
        "olivia", f"/projects/acme/development/webhooks/{endpoint.pk}/", viewport=WIDTHS[width]
    )
    page.get_by_role("button", name="Send test event").click()
    expect(page.get_by_text("Test event evt_")).to_be_visible()
    for job in Job.objects.filter(state="pending"):
        job_run(job.pk)
    page.get_by_role("button", name="Send test event").click()
    # The first answered 503: the second waits behind it, and the page says why.
    notice = page.get_by_role("note").filter(has_text="waits behind")
    expect(notice).to_contain_text("1 later delivery waits behind delivery")
    expect(notice).to_contain_text("HTTP 503")
    first = Delivery.objects.order_by("id").first()
    assert first is not None
    row = page.locator(f"#delivery-{first.pk}")
    row.get_by_text("Request and reply").click()
    expect(row.locator("pre").first).to_contain_text('"type":"webhook.test"')
    expect(row.locator("pre").nth(1)).to_have_text("busy, try later")
    fits(page)
    assert page.js_errors == []


@pytest.mark.parametrize("username", ["sam", "vera"])
def test_support_and_viewers_have_no_webhooks(
    open_page: Any, used_memory: Resource, username: str
) -> None:
    from playwright.sync_api import expect

    page = open_page(username)
    expect(page.get_by_role("link", name="Webhooks", exact=True)).to_have_count(0)
    response = page.goto("/projects/acme/development/webhooks/")
    assert response is not None
    assert response.status == 403


@pytest.mark.parametrize("width", WIDTHS)
def test_owner_sees_which_key_misbehaves(
    open_page: Any, used_memory: Resource, width: str, settings: Any
) -> None:
    from playwright.sync_api import expect
    from rest_framework.test import APIClient

    from memoryadmin.memory.services.keys import api_key_create

    settings.MEMORYADMIN_API_RATE = "3/minute"
    (good, good_raw), (bad, bad_raw) = (
        api_key_create(project_id="acme", name="nightly sync"),
        api_key_create(project_id="acme", name="chatty bot"),
    )
    docs = "/api/managed-agents/projects/acme/memory/notes/documents?environment=development"
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=good_raw)
    assert client.get(docs).status_code == 200
    client.credentials(HTTP_X_API_KEY=bad_raw)
    statuses = [
        client.get(docs.replace("documents", "documents/nope")).status_code for _ in range(5)
    ]
    assert statuses == [404, 404, 404, 429, 429]
    page = open_page("olivia", viewport=WIDTHS[width])
    page.get_by_role("link", name="Keys", exact=True).click()
    usage = page.locator(".key-usage-table")
    chatty = usage.locator(f'tr[data-key="{bad.prefix}"]')
    expect(chatty.locator('[data-usage="requests"]')).to_have_text("5")
    expect(chatty.locator('[data-usage="errors"]')).to_have_text("3")
    expect(chatty.locator('[data-usage="throttled"]')).to_have_text("2")
    nightly = usage.locator(f'tr[data-key="{good.prefix}"]')
    expect(nightly.locator('[data-usage="requests"]')).to_have_text("1")
    expect(nightly.locator('[data-usage="errors"]')).to_have_text("0")
    expect(chatty.get_by_role("img")).to_have_attribute(
        "aria-label", "5 requests in the last 24 hours"
    )
    fits(page)
    assert page.js_errors == []


@pytest.mark.parametrize("username", ["sam", "vera"])
def test_support_and_viewers_have_no_keys_page(
    open_page: Any, used_memory: Resource, username: str
) -> None:
    from playwright.sync_api import expect

    page = open_page(username)
    expect(page.get_by_role("link", name="Keys", exact=True)).to_have_count(0)
    response = page.goto("/projects/acme/development/keys/")
    assert response is not None
    assert response.status == 403


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("username", ["olivia", "sam", "vera"])
def test_every_role_sees_what_the_agent_would_see(
    open_page: Any, used_memory: Resource, username: str, width: str
) -> None:
    from playwright.sync_api import expect

    from memoryadmin.agents.models import Session

    page = open_page(username, "/projects/acme/development/deployments/", viewport=WIDTHS[width])
    page.get_by_role("link", name="What the agent sees: preview a recall…").click()
    page.get_by_label("Agent").select_option("support-bot")
    page.get_by_label("Bindings (JSON)").fill(
        '{"notes": {"scope": "document", "id": "workshop", "access": "read-write"},'
        ' "kb": {"scope": "collection"}}'
    )
    page.get_by_role("button", name="Preview the recall").click()
    notes = page.locator('[data-resource="notes"]')
    expect(notes.locator("pre.document-text")).to_contain_text("Exercises must run on Node.js 22.")
    expect(notes.get_by_text("writable")).to_be_visible()
    expect(notes.locator("[data-bytes]")).to_contain_text("of 8192 bytes")
    expect(page.locator('[data-resource="kb"]')).to_contain_text("read only")
    expect(page.get_by_text("memory_save")).to_be_visible()
    assert "agent=support-bot" in page.url  # a GET: the link reproduces it
    assert not Session.objects.exists()
    fits(page)
    assert page.js_errors == []
