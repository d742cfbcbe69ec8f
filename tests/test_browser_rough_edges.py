"""The Memory page's rough edges, in a real browser at a laptop's width (1280 px) and a
phone's (390 px): a reload that repeats a POST, times to come, cut cells, the filtered
count, empty bulk actions, tables at phone width, the session revert page, which key
wrote, the agent-writes setting and the smaller ones (issue 25)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from memoryadmin.memory.models import Document, Project, Resource
from tests.helpers import (
    BROWSER_TESTS,
    MANIFEST_MEMORY,
    PASSWORD,
    TABLES_PAST_COLUMN,
    proposed_save,
    shoot,
)

pytestmark = BROWSER_TESTS

DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
TABLET = {"width": 800, "height": 1024}
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
    page = open_page("olivia", NOTES, viewport=DESKTOP)
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

    page = open_page("vera", NOTES, viewport=viewport)
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


def test_a_part_of_the_page_past_the_persons_rate_says_how_long_to_wait(
    open_page: Any, used_memory: Resource, settings: Any
) -> None:
    from playwright.sync_api import expect

    settings.MEMORYADMIN_PAGE_RATE = "3/minute"
    page = open_page("vera", NOTES)  # the page and its count: two requests
    expect(page.locator("[data-total]")).to_have_text("4 documents")
    status = page.locator("#htmx-status")
    expect(status).to_be_hidden()
    page.get_by_label("Filter by id or title").fill("work")
    expect(status).to_be_visible()
    expect(status).to_contain_text(
        re.compile(
            r"^You are asking for pages faster than one person may \(3/minute\); "
            r"retry in \d+ seconds\.$"
        )
    )
    # htmx logs each refused request; nothing else went wrong.
    assert page.js_errors
    assert all(e.startswith("Response Status Error Code 429 from ") for e in page.js_errors)


@VIEWPORTS
def test_bulk_actions_wait_for_a_ticked_box(
    open_page: Any, used_memory: Resource, viewport: dict[str, int]
) -> None:
    from playwright.sync_api import expect

    page = open_page("olivia", NOTES, viewport=viewport)
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


# 1: a reload repeats no POST (POST/redirect/GET; a one-time secret comes from the session).


@VIEWPORTS
def test_reloading_after_create_key_makes_no_second_key(
    open_page: Any, used_memory: Resource, viewport: dict[str, int]
) -> None:
    from playwright.sync_api import expect

    from memoryadmin.memory.models import ApiKey

    page = open_page("olivia", f"{BASE}/keys/", viewport=viewport)
    before = ApiKey.objects.count()
    page.get_by_label("Name").fill("deploy bot")
    page.get_by_role("button", name="Create key").click()
    secret = page.get_by_label("The new key").input_value()
    assert secret.startswith("mak_")
    assert page.url.endswith("/keys/")  # redirected: the address bar holds a GET
    page.reload()
    expect(page.get_by_role("heading", name="API keys of Acme")).to_be_visible()
    expect(page.get_by_label("The new key")).to_have_count(0)  # shown once
    assert secret not in page.content()
    assert ApiKey.objects.count() == before + 1
    expect(page.locator("table.keys").get_by_role("row", name="deploy bot")).to_have_count(1)
    assert page.js_errors == []


def test_reloading_after_a_webhook_is_made_or_rotated_repeats_nothing(
    open_page: Any, used_memory: Resource
) -> None:
    from playwright.sync_api import expect

    from memoryadmin.webhooks.models import Endpoint

    page = open_page("olivia", f"{BASE}/webhooks/")
    page.get_by_label("URL").fill("https://example.com/hooks")
    page.get_by_label("document.created").check()
    page.get_by_role("button", name="Add webhook").click()
    secret = page.get_by_label("The signing secret").input_value()
    page.reload()
    expect(page.get_by_label("The signing secret")).to_have_count(0)
    assert Endpoint.objects.count() == 1
    endpoint = Endpoint.objects.get()
    page.goto(f"{BASE}/webhooks/{endpoint.pk}/")
    page.get_by_role("button", name="Rotate signing secret").click()
    rotated = page.get_by_label("The signing secret").input_value()
    assert rotated != secret
    page.reload()
    expect(page.get_by_label("The signing secret")).to_have_count(0)
    endpoint.refresh_from_db()
    assert endpoint.secret == rotated  # the reload rotated nothing
    assert page.js_errors == []


# 2: times to come, in words.


def test_times_to_come_read_in_words(open_page: Any, used_memory: Resource, project: Any) -> None:
    from django.utils import timezone
    from playwright.sync_api import expect

    from memoryadmin.memory.models import Proposal
    from memoryadmin.runner.jobs import enqueue
    from memoryadmin.runner.models import Job
    from memoryadmin.webhooks import services
    from memoryadmin.webhooks.delivery import line_of, webhook_deliver
    from memoryadmin.webhooks.models import Delivery

    _, proposal = proposed_save(project)
    Proposal.objects.filter(pk=proposal).update(
        expires_at=timezone.now() + timedelta(days=7, hours=1, minutes=1)
    )
    endpoint, _ = services.endpoint_create(
        project=project, url="https://example.com/hooks", events=["document.created"], actor="t"
    )
    # A delivery tried once, its job to try again in two and a half hours.
    job = enqueue(
        webhook_deliver,
        project=project.id,
        line=line_of(endpoint.pk),
        delay=2 * 3600 + 30 * 60 + 30,
        endpoint=endpoint.pk,
        event="evt_1",
    )
    Job.objects.filter(pk=job.pk).update(attempts=1)
    Delivery.objects.create(
        endpoint=endpoint,
        event_id="evt_1",
        event="document.created",
        body="{}",
        state="pending",
        job=job,
        created_at=timezone.now(),
    )
    page = open_page("olivia", f"{BASE}/review/{proposal}/")
    expect(page.locator("main")).to_contain_text("expires in 1\xa0week")
    page.goto(f"{BASE}/webhooks/{endpoint.pk}/")
    expect(page.locator("main")).to_contain_text("next in 2\xa0hours, 30\xa0minutes")
    assert page.js_errors == []


# 7: the session revert page.


@VIEWPORTS
def test_the_revert_page_is_a_sessions_page_and_says_what_it_did(
    open_page: Any, used_memory: Resource, project: Any, viewport: dict[str, int]
) -> None:
    from playwright.sync_api import expect

    from memoryadmin.memory.services.documents import document_replace
    from memoryadmin.memory.services.redaction import version_redact
    from tests.helpers import support_session

    session = support_session(project)
    workshop = Document.objects.get(resource=used_memory, doc_id="workshop")
    first = workshop.revision
    _agent_save(session, "Poison.")
    # An owner redacts the version from before the session: nothing to return to.
    version_redact(
        resource=used_memory, doc_id="workshop", revision=first, reason="leak", actor="t"
    )
    page = open_page("olivia", f"{BASE}/sessions/{session.id}/revert/", viewport=viewport)
    nav = page.get_by_role("navigation", name="Project sections")
    expect(nav.get_by_role("link", name="Sessions")).to_have_attribute("aria-current", "page")
    expect(nav.get_by_role("link", name="Memory")).not_to_have_attribute("aria-current", "page")
    expect(page.locator("main")).to_contain_text("was redacted: nothing to return to")
    assert "[redacted]" not in page.locator("main").inner_text()
    expect(page.get_by_role("button", name="Revert these documents")).to_have_count(0)

    # A second session whose document an owner changes after the plan was shown.
    other = support_session(project, idempotency_key="ticket-43")
    _agent_save(other, "Exercises must run on Node.js 22.\nPoison again.\n")
    page.goto(f"{BASE}/sessions/{other.id}/revert/")
    expect(page.locator("main")).to_contain_text("restore version")
    current = Document.objects.get(pk=workshop.pk)
    document_replace(
        resource=used_memory,
        doc_id="workshop",
        expected_revision=current.revision,
        text=current.text + "An owner's line.\n",
        actor="user:olivia",
    )
    page.get_by_role("button", name="Revert these documents").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(
        f"Nothing of what {other.id} wrote was reverted"
    )
    expect(page.locator("main")).to_contain_text("changed by others since: not overwritten")
    page.reload()  # the plan again: nothing applied twice
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Revert what {other.id} wrote")
    assert page.js_errors == []


def _agent_save(session: Any, text: str) -> None:
    from memoryadmin.agents.services.runtime import recall_create, tool_call

    recall = recall_create(session=session, use=["notes"])
    result = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c",
        name="memory_save",
        arguments={"memory": "notes", "text": text},
    )
    assert result["status"] == "saved", result


# 6: at phone width, a short header and tables as cards.

HEADER_BOTTOM = """() => Math.max(...['header.topbar', 'nav.tabs']
  .map(s => document.querySelector(s)).filter(Boolean)
  .map(e => e.getBoundingClientRect().bottom + window.scrollY))"""
# Links, buttons and boxes of table rows that are not wholly inside the window.
OFF_SCREEN = """() => Array.from(document.querySelectorAll(
    'main table.grid tbody a, main table.grid tbody button, main table.grid tbody input'))
  .filter(e => e.getClientRects().length)
  .filter(e => e.getBoundingClientRect().right > window.innerWidth
    || e.getBoundingClientRect().left < 0)
  .map(e => e.textContent.trim() || e.outerHTML.slice(0, 80))"""


def _phone_fits(page: Any) -> None:
    assert page.evaluate(HEADER_BOTTOM) < 160, page.url
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, (page.url, width)
    assert page.evaluate(OFF_SCREEN) == [], page.url


def test_at_390px_the_header_is_short_and_every_row_is_a_card_with_its_actions(
    open_page: Any, used_memory: Resource, project: Any
) -> None:
    from playwright.sync_api import expect

    from memoryadmin.memory.services.documents import document_replace
    from tests.helpers import support_session

    support_session(project)
    workshop = Document.objects.get(resource=used_memory, doc_id="workshop")
    for number in range(3):
        workshop = document_replace(
            resource=used_memory,
            doc_id="workshop",
            expected_revision=workshop.revision,
            text=f"Version {number}.\n",
            actor="user:olivia",
        )
    page = open_page("olivia", viewport=PHONE)  # on the development page, f"{BASE}/"
    _phone_fits(page)
    for path in (
        "resources/notes/",
        "resources/notes/documents/workshop/",
        "sessions/",
        "people/",
        "keys/",
        "deployments/",
        "audit/",
        "webhooks/",
    ):
        page.goto(f"{BASE}/{path}")
        _phone_fits(page)
    # The document's history: every version's Compare with its label, on screen.
    page.goto(f"{BASE}/resources/notes/documents/workshop/")
    history = page.locator("table.versions tbody tr")
    expect(history.first.locator("td[data-label='Writer']")).to_be_visible()
    compare = page.get_by_role("link", name="Compare with current")
    expect(compare).to_have_count(3)
    for link in compare.all():
        link.scroll_into_view_if_needed()
        expect(link).to_be_in_viewport()
    # People: Remove in view; Sessions: the status in view.
    page.goto(f"{BASE}/people/")
    for remove in page.locator("table.grid tbody").get_by_role("link", name="Remove").all():
        remove.scroll_into_view_if_needed()
        expect(remove).to_be_in_viewport()
    page.goto(f"{BASE}/sessions/")
    status = page.locator("table.grid tbody tr").first.get_by_text("active")
    expect(status).to_be_in_viewport()
    # The audit filters' text inputs keep a normal height.
    page.goto(f"{BASE}/audit/")
    heights = page.evaluate(
        "Array.from(document.querySelectorAll('main form input[type=text], main form select'))"
        ".map(e => e.getBoundingClientRect().height)"
    )
    assert heights
    assert max(heights) < 50, heights
    # The Deployments card holds its content, no blank space below it.
    page.goto(f"{BASE}/deployments/")
    gap = page.evaluate(
        """() => Array.from(document.querySelectorAll('main section.panel')).map(panel => {
          const last = panel.lastElementChild.getBoundingClientRect().bottom;
          return panel.getBoundingClientRect().bottom - last; })"""
    )
    assert gap
    assert max(gap) < 40, gap
    assert page.js_errors == []


def test_the_proposal_page_fits_390px(open_page: Any, used_memory: Resource, project: Any) -> None:
    from playwright.sync_api import expect

    _, proposal = proposed_save(project)
    page = open_page("olivia", f"{BASE}/review/{proposal}/", viewport=PHONE)
    expect(page.get_by_role("button", name="Reject", exact=True)).to_be_visible()
    _phone_fits(page)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.goto(f"{BASE}/review/")
    _phone_fits(page)
    # 9: the inbox names the agent and its session once, in words.
    line = page.locator("article.proposal p").first
    expect(line).to_contain_text("Proposed by support-bot in session ses_")
    assert "agent ·" not in line.inner_text()
    assert page.js_errors == []


# 10: a document resource has no provider records pages.


def test_a_document_resource_has_no_records_page(open_page: Any, used_memory: Resource) -> None:
    from playwright.sync_api import expect

    page = open_page("olivia")
    response = page.goto(f"{NOTES}records/?namespace=user-1")
    assert response is not None
    assert response.status == 404
    expect(page.locator("main")).to_contain_text("keeps documents, not provider records")
    expect(page.get_by_role("navigation", name="Project sections")).to_be_visible()


# 8: history says which API key wrote.


def test_history_names_the_api_key_that_wrote(open_page: Any, used_memory: Resource) -> None:
    from playwright.sync_api import expect

    from memoryadmin.memory.services.documents import document_replace
    from memoryadmin.memory.services.keys import api_key_create

    key, _ = api_key_create(project_id="acme", read_only=False, name="deploy bot", actor="t")
    workshop = Document.objects.get(resource=used_memory, doc_id="workshop")
    document_replace(
        resource=used_memory,
        doc_id="workshop",
        expected_revision=workshop.revision,
        text="Written with a key.\n",
        actor=f"key:{key.prefix}",
    )
    page = open_page("olivia", f"{NOTES}documents/workshop/")
    newest = page.locator("table.versions tbody tr").first
    expect(newest.locator("td").nth(1)).to_have_text(f"API key deploy bot {key.prefix}…")
    assert page.js_errors == []


# 10: the API reference renders its operations, by area, with no CSP error.


def test_the_api_reference_renders_by_area_within_the_csp(open_page: Any, people: Any) -> None:
    from playwright.sync_api import expect

    page = open_page("olivia")
    response = page.goto("/api/docs/")
    assert response is not None
    assert response.status == 200
    assert "'unsafe-inline'" not in response.headers["content-security-policy"]
    # One section per area, each with its operations.
    expect(page.locator(".opblock-tag-section")).to_have_count(16)
    webhooks = page.locator(".opblock-tag-section").filter(
        has=page.get_by_role("link", name="Webhooks", exact=True)
    )
    expect(webhooks.locator(".opblock-summary-path", has_text="/webhooks/{w}/test")).to_be_visible()
    expect(webhooks.locator(".opblock")).to_have_count(9)
    assert page.js_errors == []


@VIEWPORTS
def test_agent_writes_is_one_control_with_three_states(
    open_page: Any, used_memory: Resource, viewport: dict[str, int]
) -> None:
    from playwright.sync_api import expect

    from memoryadmin.memory.models import AuditEntry

    url = f"{NOTES}documents/workshop/"

    def stored() -> Document:
        return used_memory.documents.get(doc_id="workshop")

    page = open_page("olivia", url, viewport=viewport)
    control = page.get_by_role("group", name="Agent writes")
    expect(control.get_by_role("radio")).to_have_count(3)
    expect(control.get_by_label("Agents write", exact=True)).to_be_checked()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shoot(page, f"agent-writes-{viewport['width']}px")

    control.get_by_label("Agents propose, owners review").check()
    control.get_by_role("button", name="Apply").click()
    expect(page.get_by_role("status")).to_contain_text("wait for an owner's review")
    expect(control.get_by_label("Agents propose, owners review")).to_be_checked()
    assert (stored().agent_writes, stored().agent_review) == (True, True)

    # Agents cannot write: the freeze asks first, as it always has.
    control.get_by_label("Agents cannot write").check()
    control.get_by_role("button", name="Apply").click()
    page.get_by_role("button", name="Freeze agent writes").click()
    expect(page.get_by_role("status")).to_contain_text("Frozen")
    expect(control.get_by_label("Agents cannot write")).to_be_checked()
    assert stored().agent_writes is False

    control.get_by_label("Agents write", exact=True).check()
    control.get_by_role("button", name="Apply").click()
    expect(page.get_by_role("status")).to_contain_text("saves to workshop commit at once")
    expect(control.get_by_label("Agents write", exact=True)).to_be_checked()
    assert (stored().agent_writes, stored().agent_review) == (True, False)
    modes = ("document.review", "document.freeze", "document.unfreeze")
    actions = AuditEntry.objects.filter(document_id="workshop", action__in=modes)
    assert list(actions.order_by("id").values_list("action", flat=True)) == [
        "document.review",
        "document.freeze",
        "document.unfreeze",
        "document.review",
    ]
    assert page.js_errors == []

    viewer = open_page("vera", url, viewport=viewport)
    expect(viewer.locator("dl.meta")).to_contain_text("enabled")
    expect(viewer.get_by_role("radio")).to_have_count(0)
    assert viewer.js_errors == []


@VIEWPORTS
def test_a_title_and_an_id_without_spaces_wrap_inside_the_page(
    open_page: Any, used_memory: Resource, make_document: Any, viewport: dict[str, int]
) -> None:
    """A 240-byte title and a 128-character id with no space to break at: the heading, the
    breadcrumb, a search hit and the overview's lists wrap them rather than widen the page."""
    from playwright.sync_api import expect

    doc_id = "n" * 128
    make_document(doc_id, title="Ü" * 120, text="x" * 7000)
    document = f"{NOTES}documents/{doc_id}/"
    page = open_page("olivia", document, viewport=viewport)
    expect(page.get_by_role("heading", level=1)).to_have_text("Ü" * 120)
    for path in (document, f"{document}edit/", f"{document}delete/", f"{BASE}/search/?q=x*"):
        if path != document:
            page.goto(path)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= viewport["width"], (path, width)
    page.goto(f"{BASE}/overview/")
    expect(page.get_by_role("link", name=f"notes/{doc_id}").first).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
    assert page.js_errors == []


@pytest.mark.parametrize("viewport", [DESKTOP, TABLET], ids=["1280px", "800px"])
def test_names_without_spaces_wrap_inside_the_tables_that_list_them(
    open_page: Any, project: Project, people: Any, viewport: dict[str, int]
) -> None:
    """A resource's id, a person's name, a webhook's URL and description, an incident's
    title and source, each with no space to break at: their tables wrap them inside the
    page's column rather than widen it (at phone width tables are cards, which wrap)."""
    from django.contrib.auth import get_user_model
    from playwright.sync_api import expect

    from memoryadmin.incidents.services.incidents import incident_create
    from memoryadmin.memory.services.deployments import deployment_create
    from memoryadmin.web.services.roles import role_grant
    from memoryadmin.webhooks.services import endpoint_create

    wide = "W" * 80  # wide letters: about 1,100 px on one line
    resource_id = "m" * 128
    declared = {"id": resource_id, "description": "d", "provider": {"kind": "document"}}
    memory = [*MANIFEST_MEMORY, declared]
    deployment_create(
        project=project, agent="support-bot", memory=memory, promote="development", actor="t"
    )
    username = "M" * 80
    get_user_model().objects.create_user(username=username, password=PASSWORD)
    role_grant(username=username, project_id=project.id, role="viewer", actor="t")
    endpoint_create(
        project=project,
        url=f"https://93.184.216.34/{wide}",
        events=["document.updated"],
        description=wide,
        actor="t",
    )
    incident_create(
        project=project,
        environment="development",
        title=wide,
        source={"text": wide},
        hops=1,
        actor=f"user:{username}",
    )
    page = open_page("olivia", f"{BASE}/", viewport=viewport)
    for path, shown in [
        ("/", resource_id),
        ("/people/", username),
        ("/webhooks/", wide),
        ("/incidents/", wide),
    ]:
        page.goto(BASE + path)
        expect(page.locator("main table").get_by_text(shown).first).to_be_visible()
        assert page.evaluate(TABLES_PAST_COLUMN) <= 0.5, path
        assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"], path
    assert page.js_errors == []
