"""The review inbox in a real browser: the badge counts a proposal, the owner approves it
and the document shows where its new version came from."""

from __future__ import annotations

from typing import Any

from memoryadmin.agents.services.runtime import recall_create, tool_call
from memoryadmin.memory.models import Document, Project
from memoryadmin.memory.services.deployments import deployment_create
from tests.helpers import BROWSER_TESTS, MANIFEST_MEMORY, support_session

pytestmark = BROWSER_TESTS


def test_owner_approves_a_proposal_from_the_inbox(
    open_page: Any, people: Any, project: Project, workshop: Document
) -> None:
    from playwright.sync_api import expect

    notes = {**MANIFEST_MEMORY[0], "provider": {"kind": "document", "agentWrites": "review"}}
    deployment_create(
        project=project,
        agent="support-bot",
        memory=[notes, MANIFEST_MEMORY[1]],
        promote="development",
        actor="t",
    )
    session = support_session(project)
    recall = recall_create(session=session, use=["notes"])
    result = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="call_7",
        name="memory_save",
        arguments={"text": "Exercises must run on Node.js 24."},
    )
    assert result["status"] == "proposed"
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
