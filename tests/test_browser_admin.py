"""The Memory page as an admin, in a real browser at a laptop's width and a phone's (390 px):
error pages in the site's layout, tombstones, history in words, every mistake of a form at
once, confirmations that keep what was typed, the audit log's filters and downloads, one
environment switcher, checkbox lists with counts, and no page wider than the screen."""

from __future__ import annotations

import csv
import io
import re
import zipfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from memoryadmin.memory.models import Document, Resource
from tests.helpers import BROWSER_TESTS, shoot

pytestmark = BROWSER_TESTS

DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
VIEWPORTS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "390px"])
BASE = "/projects/acme/development"
NOTES = f"{BASE}/resources/notes/"
WORKSHOP = f"{NOTES}documents/workshop/"
# What sticks out of the window (outermost first), for the failure message.
WIDE = """() => Array.from(document.querySelectorAll('body *'))
  .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1 && !e.closest("table"))
  .slice(0, 3).map(e => e.outerHTML.slice(0, 300) + " " + e.getBoundingClientRect().right)"""


def fits(page: Any) -> None:
    """The page is no wider than the window: wide tables scroll inside themselves."""
    width = page.evaluate("document.documentElement.scrollWidth")
    wide = page.evaluate(WIDE)
    assert width <= page.viewport_size["width"], (page.url, width, wide)


@VIEWPORTS
def test_every_page_fits_the_screen_and_keeps_one_environment_switcher(
    open_page: Any, used_memory: Resource, viewport: dict[str, int]
) -> None:
    from playwright.sync_api import expect

    page = open_page("olivia", viewport=viewport)  # on the development page, f"{BASE}/"
    fits(page)
    for url in [
        NOTES,
        WORKSHOP,
        f"{WORKSHOP}edit/",
        f"{NOTES}new/",
        f"{BASE}/audit/",
        f"{BASE}/export/",
        f"{BASE}/sessions/",
        f"{BASE}/keys/",
        f"{BASE}/overview/",
        f"{BASE}/deployments/",
        f"{BASE}/people/",
        "/no/such/page/",
    ]:
        page.goto(url)
        fits(page)
    # One switcher: the environment tabs, which keep the section.
    page.goto(f"{BASE}/audit/")
    expect(page.locator("select[name=environment]")).to_have_count(0)
    expect(page.get_by_role("button", name="Switch")).to_have_count(0)
    page.get_by_role("list", name="Environment").get_by_role("link", name="Production").click()
    expect(page).to_have_url("/projects/acme/production/audit/")
    expect(page.get_by_role("heading", name="Audit log")).to_contain_text("production")
    assert page.js_errors == []


@VIEWPORTS
def test_error_pages_keep_the_navigation_and_the_role(
    open_page: Any, used_memory: Resource, viewport: dict[str, int]
) -> None:
    from playwright.sync_api import expect

    page = open_page("sam", viewport=viewport)
    response = page.goto(f"{WORKSHOP}edit/")
    assert response.status == 403
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    expect(page.get_by_role("navigation", name="Project sections")).to_be_visible()
    expect(page.locator(".account .role")).to_have_text("support")
    response = page.goto(f"{NOTES}documents/nothing-here/")
    assert response.status == 404
    expect(page.get_by_role("navigation", name="Project sections")).to_be_visible()
    response = page.goto("/no/such/page/")
    assert response.status == 404
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    expect(page.locator("header.topbar")).to_contain_text("sam")
    expect(page.get_by_role("link", name="Back to your projects")).to_be_visible()


@VIEWPORTS
def test_a_deleted_document_shows_its_tombstone(
    open_page: Any, used_memory: Resource, viewport: dict[str, int]
) -> None:
    from playwright.sync_api import expect

    page = open_page("olivia", WORKSHOP, viewport=viewport)
    page.get_by_role("link", name="Delete…").click()
    field = page.get_by_label("Type workshop to confirm")
    field.fill("works")
    page.get_by_role("button", name="Delete for good").click()
    # A wrong id: the document stays in view and the typed text in the field.
    expect(page.locator(".field-errors")).to_contain_text("Type 'workshop' exactly")
    expect(page.get_by_role("heading", name="Workshop notes")).to_be_visible()
    expect(page.get_by_label("Type workshop to confirm")).to_have_value("works")
    page.get_by_label("Type workshop to confirm").fill("workshop")
    page.get_by_role("button", name="Delete for good").click()
    expect(page.get_by_role("status")).to_contain_text("Its id stays reserved")
    assert used_memory.documents.get(doc_id="workshop").deleted is True

    response = page.goto(WORKSHOP)
    assert response.status == 404
    expect(page.get_by_role("heading", name="workshop was deleted")).to_be_visible()
    expect(page.locator(".tombstone")).to_contain_text("user:olivia")
    expect(page.locator(".tombstone")).to_contain_text("stays reserved")
    fits(page)
    page.get_by_role("link", name="Audit entries of workshop").click()
    expect(page.get_by_role("cell", name="document.delete")).to_be_visible()
    assert page.js_errors == []


@VIEWPORTS
def test_history_in_words_with_short_revisions_to_copy(
    open_page: Any, used_memory: Resource, viewport: dict[str, int]
) -> None:
    from playwright.sync_api import expect

    page = open_page(
        "olivia",
        f"{NOTES}documents/incident-0412/",
        viewport=viewport,
        permissions=["clipboard-read", "clipboard-write"],
    )
    page.get_by_label("Agents write", exact=True).check()
    page.get_by_role("button", name="Apply").click()
    history = page.locator("table.versions tbody tr")
    expect(history.nth(0)).to_contain_text("v2 unfroze agent writes")
    expect(history.nth(1)).to_contain_text("v1 created")
    document = used_memory.documents.get(doc_id="incident-0412")
    revision = history.nth(0).locator(".rev code")
    expect(revision).to_have_text(document.revision[:8])
    history.nth(0).get_by_role("button", name="Copy").click()
    expect(page.locator("#copy-status")).to_have_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == document.revision
    # No button names a revision.
    for name in page.get_by_role("button").all_inner_texts():
        assert document.revision[:8] not in name
    fits(page)
    assert page.js_errors == []


@VIEWPORTS
def test_new_document_shows_every_mistake_at_once(
    open_page: Any, used_memory: Resource, viewport: dict[str, int]
) -> None:
    from playwright.sync_api import expect

    page = open_page("olivia", f"{NOTES}new/", viewport=viewport)
    page.get_by_label("Document id").fill("workshop")
    page.get_by_label("Title").fill("Again")
    page.get_by_label("Text", exact=True).fill("x" * 8193)
    frozen = page.get_by_label("Frozen (agents may read it but not save to it)")
    box, label = frozen.bounding_box(), page.locator("label[for=id_frozen]").bounding_box()
    assert abs(box["y"] - label["y"]) < label["height"]  # the box sits beside its label
    page.get_by_role("button", name="Create document").click()
    summary = page.locator(".form-errors")
    expect(summary).to_contain_text("Correct these 2 mistakes")
    expect(summary).to_contain_text("The id 'workshop' is already in use in notes")
    expect(summary).to_contain_text("The text is 8193 UTF-8 bytes; this resource allows 8192.")
    expect(page.get_by_label("Title")).to_have_value("Again")
    assert used_memory.documents.get(doc_id="workshop").title == "Workshop notes"
    fits(page)
    assert page.js_errors == []


@VIEWPORTS
def test_audit_log_filters_and_downloads(
    open_page: Any, used_memory: Resource, viewport: dict[str, int]
) -> None:
    from playwright.sync_api import expect

    page = open_page("olivia", f"{BASE}/audit/", viewport=viewport)
    page.get_by_label("Document id contains").fill("SHOP")
    page.get_by_label("Action").select_option("document.create")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("table.audit tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("notes/workshop")
    fits(page)
    with page.expect_download() as info:
        page.get_by_role("link", name="CSV").click()
    table = list(csv.reader(io.StringIO(Path(info.value.path()).read_text())))
    assert [(row[4], row[5], row[6]) for row in table[1:]] == [
        ("document.create", "notes", "workshop")
    ]
    page.get_by_role("link", name="notes/workshop").click()
    expect(page.get_by_role("heading", name="Workshop notes")).to_be_visible()
    assert page.js_errors == []


@VIEWPORTS
def test_export_lists_boxes_beside_labels_with_counts_and_select_all_or_none(
    open_page: Any, used_memory: Resource, viewport: dict[str, int]
) -> None:
    from playwright.sync_api import expect

    page = open_page("olivia", f"{BASE}/export/", viewport=viewport)
    count = page.locator("[data-selection-count]")
    expect(count).to_have_text("3 of 3 resources selected, 5 documents")
    page.get_by_role("link", name="Select none").click()
    expect(page.get_by_role("checkbox", name="notes")).not_to_be_checked()
    expect(count).to_have_text("0 of 3 resources selected, 0 documents")
    page.get_by_role("checkbox", name="notes").check()
    expect(count).to_have_text("1 of 3 resources selected, 4 documents")
    box = page.get_by_role("checkbox", name="notes").bounding_box()
    label = page.locator("label", has_text="notes").bounding_box()
    assert abs(box["y"] - label["y"]) < label["height"]
    assert box["x"] < label["x"]
    page.get_by_role("link", name="Select all").click()
    expect(count).to_have_text("3 of 3 resources selected, 5 documents")
    fits(page)
    assert page.js_errors == []


PAGE_BUDGET = 150 * 1024


def _collect(into: list[Any]) -> Any:
    # Playwright wants a Python function, not a bound builtin such as list.append.
    return lambda request: into.append(request)


def test_no_page_weighs_over_150_kb_on_first_load(
    open_page: Any, browser: Any, used_memory: Resource, live_server: Any
) -> None:
    """Everything a page pulls in on a first visit (empty cache), as transferred. The live
    test server sends files uncompressed, so this is an upper bound of production's. The
    pages load side by side, each in a context of its own (its own cache), so that their
    waits for the network to go quiet (half a second each) overlap."""
    from memoryadmin.memory.models import Document

    revision = Document.objects.get(resource=used_memory, doc_id="workshop").revision
    state = open_page("olivia").context.storage_state()
    urls = [
        f"{BASE}/",
        NOTES,
        WORKSHOP,
        f"{WORKSHOP}edit/",
        f"{WORKSHOP}versions/{revision}/",
        f"{NOTES}new/",
        f"{BASE}/audit/",
        f"{BASE}/export/",
        f"{BASE}/sessions/",
        f"{BASE}/keys/",
        f"{BASE}/overview/",
        f"{BASE}/deployments/",
        f"{BASE}/people/",
    ]
    loads = []
    for url in urls:
        context = browser.new_context(base_url=live_server.url, storage_state=state)
        page = context.new_page()
        responses: list[Any] = []
        page.on("requestfinished", _collect(responses))
        page.goto(url, wait_until="commit")
        loads.append((url, context, page, responses))
    weights = {}
    for url, context, page, responses in loads:
        page.wait_for_load_state("networkidle")
        total = 0
        for request in responses:
            sizes = request.sizes()
            total += sizes["responseBodySize"] + sizes["responseHeadersSize"]
        weights[url] = total
        context.close()
    heaviest = max(weights, key=lambda url: weights[url])
    assert weights[heaviest] <= PAGE_BUDGET, weights
    assert min(weights.values()) > 10_000  # the stylesheet and scripts were counted


@VIEWPORTS
def test_keyboard_moves_in_lists_cancels_confirmations_and_explains_itself(
    open_page: Any, used_memory: Resource, viewport: dict[str, int]
) -> None:
    from playwright.sync_api import expect

    page = open_page("olivia", NOTES, viewport=viewport)
    page.keyboard.press("/")
    expect(page.get_by_label("Filter by id or title")).to_be_focused()
    page.keyboard.press("Tab")
    page.locator("main h1").click()
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("k")
    first = page.locator("#document-rows tr").first
    expect(first.get_by_role("link")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{NOTES}documents/incident-0412/")

    page.get_by_role("link", name="Delete…").click()
    expect(page.get_by_label("Type incident-0412 to confirm")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.locator("#panel")).to_be_empty()
    expect(page.get_by_role("link", name="Delete…")).to_be_focused()

    page.keyboard.press("?")
    help_dialog = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(help_dialog).to_be_visible()
    expect(help_dialog).to_contain_text("Cancel a confirmation")
    fits(page)
    page.keyboard.press("Escape")
    expect(help_dialog).to_be_hidden()
    assert used_memory.documents.get(doc_id="incident-0412").deleted is False
    assert page.js_errors == []


@VIEWPORTS
def test_overview_draws_charts_on_the_server_with_their_numbers(
    open_page: Any, used_memory: Resource, viewport: dict[str, int]
) -> None:
    from django.utils import timezone
    from playwright.sync_api import expect

    from memoryadmin.memory.models import AuditEntry

    # The replace (made on the owner's behalf) two days ago: two days of document
    # changes, drawn; no session yet, so no sessions chart.
    agent_save = AuditEntry.objects.filter(action__startswith="document.", actor="agent")
    assert agent_save.update(created_at=timezone.now() - timedelta(days=2)) == 1
    page = open_page("vera", viewport=viewport)
    page.get_by_role("link", name="Overview").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    chart = page.get_by_role("img", name="Document changes per day")
    expect(chart).to_be_visible()
    expect(chart.locator("rect.series-owner")).to_have_count(2)
    sessions = page.locator("figure.chart").filter(has_text="Sessions and recall failures")
    expect(sessions).to_contain_text("Not enough history yet")
    expect(sessions.locator("svg")).to_have_count(0)
    page.get_by_text("Document changes per day as a table").click()
    expect(page.locator("figure.chart table").first).to_be_visible()
    fits(page)
    shoot(page, "overview" if viewport == DESKTOP else "overview-phone", full_page=True)
    chart.locator("a").filter(has=page.locator("rect.series-owner")).last.click()
    expect(page).to_have_url(re.compile(r"/audit/\?action=document\.\*&by=owner&since="))
    # The 5 document changes of development today (its creates).
    expect(page.locator("table.audit tbody tr")).to_have_count(5)
    assert page.js_errors == []


@VIEWPORTS
def test_owner_invites_changes_a_role_and_promotes_an_earlier_deployment(
    open_page: Any, used_memory: Resource, viewport: dict[str, int]
) -> None:
    from playwright.sync_api import expect

    from memoryadmin.memory.models import ActiveDeployment, Deployment
    from memoryadmin.web.models import ProjectRole

    page = open_page("olivia", viewport=viewport)
    page.get_by_role("link", name="People").click()
    page.get_by_label("New username").fill("nina")
    page.get_by_label("a link to set their own password").check()
    page.get_by_role("button", name="Invite").click()
    link = page.get_by_label("Set-password link").input_value()
    assert "/set-password/" in link
    row = page.get_by_role("row", name="vera")
    row.get_by_label("Role of vera").select_option("support")
    row.get_by_role("button", name="Change role").click()
    expect(page.get_by_role("status")).to_contain_text("vera is now support")
    assert ProjectRole.objects.get(user__username="vera").role == "support"
    fits(page)

    page.get_by_role("link", name="Deployments").click()
    earlier = Deployment.objects.filter(agent="archivist").order_by("created_at").first()
    assert earlier is not None
    history = page.get_by_role("row", name=earlier.id)
    history.get_by_role("link", name="Promote to development…").click()
    page.get_by_role("button", name="Promote").click()
    expect(page.get_by_role("status")).to_contain_text(f"{earlier.id} is now the active")
    active = ActiveDeployment.objects.get(environment="development", agent="archivist")
    assert active.deployment_id == earlier.id
    expect(page.locator("section.panel", has_text="archivist")).to_contain_text("archive")
    fits(page)
    assert page.js_errors == []


@VIEWPORTS
def test_dark_mode_follows_the_system_setting(
    open_page: Any, used_memory: Resource, viewport: dict[str, int]
) -> None:
    page = open_page("olivia", WORKSHOP, viewport=viewport, color_scheme="dark")
    background = page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
    text = page.evaluate("getComputedStyle(document.body).color")
    assert background == "rgb(20, 24, 29)"
    assert text == "rgb(227, 232, 238)"
    light = open_page("olivia", WORKSHOP, viewport=viewport, color_scheme="light")
    assert light.evaluate("getComputedStyle(document.documentElement).backgroundColor") == (
        "rgb(255, 255, 255)"
    )
    fits(page)
    assert page.js_errors == []


@VIEWPORTS
def test_a_provider_resource_shows_connection_and_tools(
    open_page: Any, used_memory: Resource, viewport: dict[str, int]
) -> None:
    from playwright.sync_api import expect

    Resource.objects.create(
        project=used_memory.project,
        environment="development",
        resource_id="facts",
        kind="http",
        max_bytes=8192,
        config={
            "connection": {
                "id": "memory-service",
                "origin": "https://memory.example.com",
                "pathPrefix": "/oc-memory",
                "headers": {"Authorization": {"secret": "MEMORY_TOKEN", "scheme": "Bearer"}},
            },
            "path": "/oc-memory",
            "tools": [{"name": "remember", "description": "Save a fact.", "access": "write"}],
        },
    )
    page = open_page("sam", viewport=viewport)
    page.get_by_role("link", name="facts").click()
    expect(page.get_by_role("heading", name="facts")).to_be_visible()
    expect(page.locator("dl.meta")).to_contain_text("https://memory.example.com")
    expect(page.locator("dl.meta")).to_contain_text("MEMORY_TOKEN")
    expect(page.get_by_role("row", name="remember")).to_contain_text("write")
    fits(page)
    assert page.js_errors == []


# Row heights and header widths of the document list, to compare before and after "Load more".
ROW_HEIGHTS = """() => Array.from(document.querySelectorAll('#document-rows tr:not(.load-more)'))
  .map(r => Math.round(r.getBoundingClientRect().height))"""
COLUMN_WIDTHS = """() => Array.from(document.querySelectorAll('table.documents thead tr > *'))
  .map(c => Math.round(c.getBoundingClientRect().width))"""


@VIEWPORTS
def test_documents_list_sorts_loads_more_in_place_and_freezes_a_selection(
    open_page: Any, used_memory: Resource, viewport: dict[str, int]
) -> None:
    from django.utils import timezone
    from playwright.sync_api import expect

    now = timezone.now()
    used_memory.documents.bulk_create(
        Document(
            resource=used_memory,
            doc_id=f"bulk-{i:03d}",
            title=f"A long title that would wrap onto a second line, number {i}, " * 3,
            text="x",
            bytes=1000 + i * 10,
            revision=f"r{i}",
            updated_at=now - timedelta(days=1, seconds=i),
            created_at=now,
            writer_kind="owner",
        )
        for i in range(60)
    )
    live = used_memory.documents.filter(deleted=False)
    by_size = list(live.order_by("-bytes", "doc_id").values_list("doc_id", flat=True))
    page = open_page("olivia", NOTES, viewport=viewport)
    expect(page.locator("[data-total]")).to_have_text(f"{len(by_size)} documents")
    page.get_by_role("navigation", name="Sort documents").get_by_role("link", name="Size").click()
    expect(page).to_have_url(re.compile(r"sort=size"))
    rows = page.locator("#document-rows tr:not(.load-more) th[scope=row]")
    expect(rows).to_have_count(50)
    expect(rows.first).to_have_text("bulk-059")
    expect(page.locator("#document-rows tr").first).to_contain_text("1.6 KiB")
    widths = page.evaluate(COLUMN_WIDTHS)
    page.get_by_role("link", name="Load more documents").click()
    expect(rows).to_have_count(len(by_size))
    assert rows.all_inner_texts() == by_size  # the same order across pages
    assert page.evaluate(COLUMN_WIDTHS) == widths
    if viewport == DESKTOP:  # at phone width each row is a card, its title wrapped
        heights = page.evaluate(ROW_HEIGHTS)
        assert max(heights) - min(heights) <= 1, heights  # one line per row, long titles cut
    fits(page)

    # Select all on the page, then none, then two documents to freeze.
    select_all = page.get_by_role("checkbox", name="Select all documents on the page")
    select_all.check()
    expect(page.locator('input[name="doc"]:checked')).to_have_count(len(by_size))
    select_all.uncheck()
    expect(page.locator('input[name="doc"]:checked')).to_have_count(0)
    page.get_by_role("checkbox", name="Select bulk-059").check()
    page.get_by_role("checkbox", name="Select bulk-058").check()
    expect(page.locator("[data-bulk-count]")).to_have_text("2 selected:")
    page.get_by_role("button", name="Freeze selected", exact=True).click()
    expect(page.get_by_role("heading", name="Freeze 2 documents in notes?")).to_be_visible()
    page.get_by_role("button", name="Freeze 2 documents", exact=True).click()
    expect(page.locator(".messages")).to_contain_text("Froze 2 documents.")
    frozen = set(
        live.filter(agent_writes=False, doc_id__startswith="bulk-").values_list("doc_id", flat=True)
    )
    assert frozen == {"bulk-059", "bulk-058"}

    # The list came back as it was, sorted by size.
    expect(page).to_have_url(re.compile(r"sort=size"))
    expect(rows.first).to_have_text("bulk-059")

    # Export two selected documents: a download of just those, nothing changed.
    page.get_by_role("checkbox", name="Select bulk-057").check()
    page.get_by_role("checkbox", name="Select bulk-056").check()
    with page.expect_download() as download:
        page.get_by_role("button", name="Export selected", exact=True).click()
    with zipfile.ZipFile(download.value.path()) as archive:
        files = sorted(name for name in archive.namelist() if name.endswith(".json"))
    assert files == ["manifest.json", "notes/bulk-056.json", "notes/bulk-057.json"]
    assert page.js_errors == []
