"""The review inbox in a real browser: the badge counts a proposal, the owner approves it
and the document shows where its new version came from."""

from __future__ import annotations

from typing import Any

from memoryadmin.memory.models import Document, Project
from tests.helpers import BROWSER_TESTS, proposed_save

pytestmark = BROWSER_TESTS


def test_owner_approves_a_proposal_from_the_inbox(
    open_page: Any, people: Any, project: Project, workshop: Document
) -> None:
    from playwright.sync_api import expect

    proposed_save(project)
    page = open_page("olivia")
    expect(page.locator("#review-count")).to_have_text("1")
    page.get_by_role("link", name="Review").first.click()
    expect(page.get_by_role("heading", name="notes/workshop")).to_be_visible()
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page.get_by_text("Approved: workshop")).to_be_visible()
    expect(page.get_by_text("No pending proposals.")).to_be_visible()
    page.goto("/projects/acme/development/resources/notes/documents/workshop/")
    expect(page.locator("td.origin").first).to_contain_text("call_7")
    assert page.js_errors == []
    assert Document.objects.get(pk=workshop.pk).text == "Exercises must run on Node.js 24."
