"""The Memory page's rough edges, in a real browser at a laptop's width (1280 px) and a
phone's (390 px): a reload that repeats a POST, times to come, cut cells, the filtered
count, empty bulk actions, tables at phone width, the session revert page, which key
wrote, the agent-writes setting and the smaller ones (issue 25)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from memoryadmin.memory.models import Document, Resource
from tests.helpers import BROWSER_TESTS

pytestmark = BROWSER_TESTS

DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
VIEWPORTS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280px", "390px"])
BASE = "/projects/acme/development"
NOTES = f"{BASE}/resources/notes/"
SESSION_ID = "ses_4f2a9c0b1d2e3f4a5b6c7d8e"

# Cells whose text is wider than the cell (cut, or hidden behind an ellipsis).
CLIPPED = """(selector) => Array.from(document.querySelectorAll(selector))
  .filter(cell => cell.scrollWidth > cell.clientWidth + 1)
  .map(cell => cell.textContent.trim() + ": " + cell.scrollWidth + " > " + cell.clientWidth)"""


def _aged(doc_id: str, **fields: Any) -> None:
    Document.objects.filter(doc_id=doc_id, resource__environment="development").update(**fields)


def test_the_document_list_at_1280_cuts_no_cell_but_the_summary(
    open_page: Any, used_memory: Resource, make_document: Any
) -> None:
    from django.utils import timezone
    from playwright.sync_api import expect

    make_document("sizes", title="A title of thirty-six characters, ok", text="x" * 3700)
    _aged("sizes", updated_at=timezone.now() - timedelta(days=27, hours=3))
    _aged(
        "onboarding",
        writer_kind="agent",
        writer_session_id=SESSION_ID,
        updated_at=timezone.now() - timedelta(days=13, hours=23),
    )
    page = open_page("olivia", viewport=DESKTOP)
    page.goto(NOTES)
    row = page.get_by_role("row", name="sizes")
    expect(row).to_contain_text("3 weeks ago")
    expect(row).to_contain_text("3.6 KiB")
    agent = page.get_by_role("row", name="onboarding")
    expect(agent).to_contain_text("agent · ses_4f2a…")
    expect(agent.locator(f'code[title="{SESSION_ID}"]')).to_be_visible()
    # Every cell shows its whole text (the summary alone is cut, its text on hover).
    clipped = page.evaluate(CLIPPED, "#document-rows td:not(.summary), #document-rows th")
    assert clipped == [], clipped
    assert page.evaluate(CLIPPED, "table.documents thead th") == []
    assert page.js_errors == []


@VIEWPORTS
def test_the_filtered_list_counts_what_matches(
    open_page: Any, used_memory: Resource, viewport: dict[str, int]
) -> None:
    from playwright.sync_api import expect

    page = open_page("vera", viewport=viewport)
    page.goto(NOTES)
    total = page.locator("[data-total]")
    expect(total).to_have_text("4 documents")
    page.get_by_label("Filter by id or title").fill("work")
    expect(page.locator("#document-rows tr")).to_have_count(2)
    expect(total).to_have_text("2 of 4 documents")
    page.get_by_label("Filter by id or title").fill("")
    expect(total).to_have_text("4 documents")
    # A filtered list opened from its URL counts the same way.
    page.goto(NOTES + "?q=onb")
    expect(total).to_have_text("1 of 4 documents")
    assert page.js_errors == []


@VIEWPORTS
def test_bulk_actions_wait_for_a_ticked_box(
    open_page: Any, used_memory: Resource, viewport: dict[str, int]
) -> None:
    from playwright.sync_api import expect

    page = open_page("olivia", viewport=viewport)
    page.goto(NOTES)
    freeze = page.get_by_role("button", name="Freeze selected", exact=True)
    delete = page.get_by_role("button", name="Delete selected", exact=True)
    expect(freeze).to_be_disabled()
    expect(delete).to_be_disabled()
    page.get_by_role("checkbox", name="Select workshop").check()
    expect(freeze).to_be_enabled()
    expect(page.locator("[data-bulk-count]")).to_have_text("1 selected:")
    page.get_by_role("checkbox", name="Select workshop").uncheck()
    expect(freeze).to_be_disabled()
    # Rows the filter swaps in come unticked: the buttons wait again.
    page.get_by_role("checkbox", name="Select all documents on the page").check()
    expect(delete).to_be_enabled()
    page.get_by_label("Filter by id or title").fill("work")
    expect(page.locator("#document-rows tr")).to_have_count(2)
    expect(delete).to_be_disabled()

    # Sent anyway (as a page without script would): a message on the list, no error page.
    page.evaluate("document.querySelectorAll('#bulk button').forEach(b => b.disabled = false)")
    freeze.click()
    expect(page.locator(".messages")).to_contain_text(
        "Nothing was selected: tick the documents to act on first."
    )
    expect(page.get_by_role("heading", name="notes", exact=True)).to_be_visible()
    assert not Document.objects.filter(agent_writes=False, doc_id="workshop").exists()
    assert page.js_errors == []
