"""The Sessions page in a real browser: a support user finds the session that saved a document,
ends it and sees its memory writes revoked. Takes the sessions screenshots of
docs/memory-page.md."""

from __future__ import annotations

from typing import Any

from memoryadmin.agents.models import Session
from memoryadmin.agents.services.runtime import recall_create, tool_call
from memoryadmin.agents.services.sessions import session_create, session_end
from memoryadmin.memory.models import AuditEntry, Project, Resource
from tests.helpers import BROWSER_TESTS, shoot, support_session

pytestmark = BROWSER_TESTS


def _sessions(project: Project) -> Session:
    """An ended session, an archivist one, and the support-bot session that saved workshop."""
    older, _ = session_create(
        project=project,
        agent_id="support-bot@development",
        memory={"kb": {"scope": "collection"}},
        idempotency_key="ticket-17",
        actor="test",
    )
    session_end(session=older, actor="user:olivia")
    session_create(
        project=project, agent_id="archivist@development", idempotency_key="nightly", actor="test"
    )
    session = support_session(project)
    recall = recall_create(session=session, use=["notes", "kb"])
    saved = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="call_1",
        name="memory_save",
        arguments={"text": "Exercises must run on Node.js 22.\nBring a laptop.\n"},
    )
    assert saved["status"] == "saved", saved
    return session


def test_support_opens_the_session_that_saved_a_document_and_ends_it(
    open_page: Any, used_memory: Resource, project: Project
) -> None:
    from playwright.sync_api import expect

    session = _sessions(project)
    page = open_page("sam")

    # The document names its last writer: the agent session, linked.
    page.goto("/projects/acme/development/resources/notes/documents/workshop/")
    page.get_by_role("link", name=session.id).first.click()
    expect(page.get_by_role("heading", name=f"Session {session.id}")).to_be_visible()

    page.get_by_role("link", name="Sessions", exact=True).first.click()
    rows = page.locator("#session-rows tr")
    expect(rows).to_have_count(3)
    expect(rows.first).to_contain_text("support-bot")
    expect(rows.first).to_contain_text("writable")
    expect(page.get_by_role("row", name="ended")).to_contain_text("kb: collection")
    shoot(page, "sessions")

    page.get_by_label("Status").select_option("ended")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    page.get_by_role("link", name="Clear").click()
    expect(rows).to_have_count(3)

    page.get_by_role("link", name=session.id).click()
    notes = page.get_by_role("row", name="notes")
    expect(notes.locator("td.writable")).to_have_text("true")
    events = page.locator("table.events tbody tr")
    expect(events).to_have_count(2)
    expect(events.nth(0)).to_contain_text("session.created")
    expect(events.nth(1)).to_contain_text("memory.saved")
    expect(events.nth(1)).to_contain_text("documentId: workshop")
    shoot(page, "session", full_page=True)

    page.get_by_role("link", name="End session…").click()
    confirm = page.get_by_role("button", name="End session")
    expect(confirm).to_be_focused()  # focus follows the swapped-in confirmation
    confirm.click()
    expect(page.get_by_role("status")).to_contain_text(f"Ended {session.id}")
    expect(page.locator("h1 + .badge")).to_have_text("ended")
    expect(notes.locator("td.writable")).to_have_text("false")
    expect(page.get_by_role("link", name="End session…")).to_have_count(0)
    expect(page.locator("table.events tbody tr").nth(2)).to_contain_text("session.ended")

    ended = Session.objects.get(pk=session.pk)
    assert ended.status == "ended"
    entry = AuditEntry.objects.get(action="session.end", detail__session=session.id)
    assert entry.actor == "user:sam"
    assert page.js_errors == []
