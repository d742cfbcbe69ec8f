"""The incident view in a real browser, at 1280 and 390 px: support traces a poisoned version
from its page, reads the graph hop by hop, dry-runs and freezes; an owner contains the rest.
Takes the screenshots of docs/incidents.md."""

from __future__ import annotations

from typing import Any

import pytest

from memoryadmin.agents.models import Session
from memoryadmin.incidents.models import Incident
from memoryadmin.incidents.services.incidents import incident_create
from memoryadmin.memory.models import Document, Project
from tests.fake_providers import FakeMem0Oss
from tests.helpers import BROWSER_TESTS, shoot
from tests.test_incidents import poisoned_world

pytestmark = BROWSER_TESTS


@pytest.fixture
def world(project: Project, mem0_oss: FakeMem0Oss) -> dict[str, Any]:
    return poisoned_world(project, mem0_oss)


def _no_sideways_scroll(page: Any) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], width


def test_support_traces_a_version_reads_the_graph_and_freezes(
    open_page: Any, people: Any, world: dict[str, Any]
) -> None:
    from playwright.sync_api import expect

    poisoned = world["poisoned"].revision
    page = open_page(
        "sam", f"/projects/acme/development/resources/notes/documents/runbook/versions/{poisoned}/"
    )
    page.get_by_role("button", name="Trace an incident from this version").click()
    expect(
        page.get_by_role("heading", name=f"Version {poisoned[:8]} of notes/runbook")
    ).to_be_visible()
    for hop in range(4):
        expect(page.get_by_role("heading", name=f"Hop {hop}", exact=False)).to_be_visible()
    hop3 = page.get_by_role("listitem").filter(has=page.get_by_role("heading", name="Hop 3"))
    expect(hop3.get_by_role("link", name=f"mem/{world['record']}")).to_be_visible()
    # The table equivalent names every node with its evidence.
    rows = page.locator("table.incident-nodes tbody tr")
    expect(rows).to_have_count(Incident.objects.get().graph["nodes"].__len__())
    affected = page.get_by_role("region", name="Sessions (3)")
    expect(affected.get_by_role("link", name=world["relay"].id)).to_be_visible()
    # Support may dry-run and freeze, not contain.
    expect(page.get_by_role("button", name="Contain", exact=False)).to_have_count(0)
    page.get_by_role("button", name="Dry run").click()
    expect(page.get_by_role("heading", name="Dry run: what containing would do")).to_be_visible()
    assert not Document.objects.filter(agent_writes=False).exists()
    shoot(page, "incident", full_page=True)
    page.get_by_role("button", name="Freeze affected documents").click()
    expect(page.get_by_role("status").filter(has_text="freeze:")).to_be_visible()
    assert Document.objects.filter(agent_writes=False).count() == 3
    assert not Session.objects.filter(status="ended").exists()
    # The graph links to each node's page.
    page.get_by_role("link", name=world["relay"].id).first.click()
    expect(page.get_by_role("heading", name=f"Session {world['relay'].id}")).to_be_visible()
    assert page.js_errors == []


def test_an_owner_contains_on_a_phone(
    open_page: Any, people: Any, project: Project, world: dict[str, Any]
) -> None:
    from playwright.sync_api import expect

    version = {"resource": "notes", "document": "runbook", "revision": world["poisoned"].revision}
    incident = incident_create(
        project=project,
        environment="development",
        title="Refund poison",
        source={"version": version},
        hops=3,
        actor="user:sam",
    )
    page = open_page(
        "olivia",
        f"/projects/acme/development/incidents/{incident.id}/",
        viewport={"width": 390, "height": 844},
    )
    expect(page.get_by_role("heading", name="Refund poison")).to_be_visible()
    _no_sideways_scroll(page)
    shoot(page, "incident-phone", full_page=True)
    # Containing asks first, in place, saying what it would do; Esc cancels it.
    page.get_by_role("link", name="Contain: freeze, endSessions, revert").click()
    dialog = page.locator("#panel .confirm-contain")
    expect(dialog).to_contain_text("endSessions: 3 ended")
    page.keyboard.press("Escape")
    expect(dialog).to_have_count(0)
    assert not Session.objects.filter(status="ended").exists()
    page.get_by_role("link", name="Contain: freeze, endSessions, revert").click()
    confirm = page.get_by_role("button", name="Contain: freeze, endSessions, revert")
    expect(confirm).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("status").filter(has_text="changes")).to_be_visible()
    assert set(Session.objects.filter(status="ended").values_list("id", flat=True)) == {
        world["reader"].id,
        world["relay"].id,
        world["archivist"].id,
    }
    assert Document.objects.get(doc_id="runbook").text == "runbook v1"
    expect(page.locator("table.incident-nodes")).to_contain_text("endSessions: ended")
    _no_sideways_scroll(page)
    assert page.js_errors == []


def test_a_viewer_reads_the_incident_without_its_buttons(
    open_page: Any, people: Any, project: Project, world: dict[str, Any]
) -> None:
    from playwright.sync_api import expect

    incident = incident_create(
        project=project,
        environment="development",
        title="Seen by a viewer",
        source={"session": world["relay"].id},
        hops=1,
        actor="user:sam",
    )
    page = open_page("vera")
    page.get_by_role("link", name="Incidents").click()
    page.get_by_role("link", name="Seen by a viewer").click()
    expect(page.get_by_role("heading", name="Hop 1")).to_be_visible()
    expect(page.get_by_role("button", name="Dry run")).to_have_count(0)
    expect(page.get_by_role("button", name="Trace")).to_have_count(0)
    assert incident.id in page.url
