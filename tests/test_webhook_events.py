"""Webhook events, door by door: every documented change queues its events exactly once,
with the documented data (ids, revision, actor; never the text), in the change's
transaction, and a refused change queues none.

The deliveries are read from the outbox as the change's transaction left them (the
endpoint wants every event); sending them is test_webhooks.py's."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from memoryadmin.memory.models import AuditEntry, Document, Project, Resource
from memoryadmin.memory.services.documents import document_create, document_replace
from memoryadmin.webhooks.models import Delivery
from memoryadmin.webhooks.outbox import EVENT_TYPES
from tests.helpers import Receiver, erase_now, proposed_save, serve, support_session

pytestmark = pytest.mark.django_db

API = "/api/managed-agents/projects/acme"
DOCS = f"{API}/memory/notes/documents"
ENV = "?environment=development"
PAGE = "/projects/acme/development/resources/notes/"
SECRET_TEXT = "Exercises must run on Node.js 22."


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from serve(Receiver())


@pytest.fixture
def listening(api: APIClient, receiver: Receiver) -> None:
    """An endpoint of acme that wants every event."""
    response = api.post(
        f"{API}/webhooks", {"url": receiver.url, "events": list(EVENT_TYPES)}, format="json"
    )
    assert response.status_code == 201, response.json()


def queued() -> list[tuple[str, dict[str, Any]]]:
    """(event, data) of every delivery queued so far, oldest first; the body's type and
    the delivery's agree."""
    found = []
    for delivery in Delivery.objects.order_by("pk"):
        body = json.loads(delivery.body)
        assert body["type"] == delivery.event
        assert (body["project"], body["environment"]) == ("acme", "development")
        found.append((delivery.event, body["data"]))
    return found


def forget() -> None:
    Delivery.objects.all().delete()


def current(doc_id: str = "workshop") -> Document:
    return Document.objects.get(doc_id=doc_id)


def etag(response: Any) -> str:
    return str(response["ETag"]).strip('"')


def patch(api: APIClient, document: Document, body: dict[str, Any]) -> Any:
    return api.patch(
        f"{DOCS}/{document.doc_id}{ENV}",
        body,
        format="json",
        HTTP_IF_MATCH=f'"{document.revision}"',
    )


def set_mode(document: Document, **fields: Any) -> Document:
    Document.objects.filter(pk=document.pk).update(**fields)
    return current(document.doc_id)


# A patch raises the events of what it changed: a freeze or unfreeze where agent writes
# turned off or on, an update where the title or the review setting changed (or where
# nothing else is raised: its new revision is a change too).
PATCHES = [
    # (document's agent_writes, its agent_review, the patch, events)
    (True, None, {"title": "Renamed"}, ["document.updated"]),
    (True, None, {"agentWrites": "disabled"}, ["document.frozen"]),
    (False, None, {"agentWrites": "enabled"}, ["document.unfrozen"]),
    (True, None, {"agentWrites": "review"}, ["document.updated"]),
    (
        True,
        None,
        {"title": "Renamed", "agentWrites": "disabled"},
        ["document.frozen", "document.updated"],
    ),
    (
        False,
        None,
        {"title": "Renamed", "agentWrites": "enabled"},
        ["document.unfrozen", "document.updated"],
    ),
    (False, False, {"agentWrites": "review"}, ["document.unfrozen", "document.updated"]),
    (False, True, {"agentWrites": "enabled"}, ["document.unfrozen", "document.updated"]),
    (True, True, {"agentWrites": "enabled"}, ["document.updated"]),
    (False, None, {"agentWrites": "disabled"}, ["document.updated"]),
    (True, False, {"agentWrites": "enabled"}, ["document.updated"]),
]


@pytest.mark.parametrize(("writes", "review", "body", "events"), PATCHES)
def test_a_patch_raises_the_events_of_what_it_changed(
    api: APIClient,
    listening: None,
    workshop: Document,
    writes: bool,
    review: bool | None,
    body: dict[str, Any],
    events: list[str],
) -> None:
    document = set_mode(workshop, agent_writes=writes, agent_review=review)
    forget()
    response = patch(api, document, body)
    assert response.status_code == 200, response.json()
    after = current()
    assert after.agent_writes == (body.get("agentWrites", "enabled") != "disabled")
    found = queued()
    assert [event for event, _ in found] == events
    for _, data in found:
        assert data == {
            "resource": "notes",
            "document": "workshop",
            "revision": after.revision,
            "actor": data["actor"],
        }
        assert data["actor"].startswith("key:")
    # Each event stands on an audit entry of the patch's revision.
    actions = list(
        AuditEntry.objects.filter(revision=after.revision)
        .order_by("pk")
        .values_list("action", flat=True)
    )
    assert len(actions) == len(events)


def test_a_refused_patch_queues_nothing(
    api: APIClient, listening: None, workshop: Document
) -> None:
    stale = workshop
    document_replace(
        resource=workshop.resource,
        doc_id="workshop",
        expected_revision=workshop.revision,
        text="newer",
        actor="t",
    )
    forget()
    response = patch(api, stale, {"title": "Renamed", "agentWrites": "disabled"})
    assert response.status_code == 412
    assert queued() == []
    assert current().agent_writes is True


# Every door of every documented change: what it queues.


class Actor:
    """An actor of a kind (an API key's prefix, a user, the CLI's login differ by run)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.startswith(self.prefix)

    def __repr__(self) -> str:
        return f"{self.prefix}..."


KEY, USER, CLI = Actor("key:"), Actor("user:olivia"), Actor("cli:")


@dataclass
class Doors:
    api: APIClient
    owner: Client
    project: Project
    notes: Resource
    workshop: Document
    tmp_path: Any

    def agent_save(self, session: Any, text: str) -> dict[str, Any]:
        sessions = "/api/managed-agents/sessions"
        recall = self.api.post(
            f"{sessions}/{session.id}/memory/recall",
            {"use": ["notes"], "input": {"text": "hi"}},
            format="json",
        )
        assert recall.status_code == 200, recall.json()
        call = {
            "recallId": recall.json()["recallId"],
            "callId": "c1",
            "name": "memory_save",
            "arguments": {"text": text},
        }
        saved = self.api.post(f"{sessions}/{session.id}/memory/tool-calls", call, format="json")
        assert saved.status_code == 200, saved.json()
        result: dict[str, Any] = saved.json()["result"]
        return result


def on(doc_id: str, actor: Actor | str, revision: str | None = None, **more: Any) -> dict[str, Any]:
    """The data of an event of a document (its current revision unless named)."""
    if revision is None:
        revision = current(doc_id).revision
    return {"resource": "notes", "document": doc_id, "revision": revision, "actor": actor, **more}


def cli(*args: str) -> None:
    call_command("memory", "--project", "acme", *args, stdout=StringIO(), stderr=StringIO())


def api_create(d: Doors) -> list[tuple[str, dict[str, Any]]]:
    response = d.api.put(
        f"{DOCS}/plan{ENV}",
        {"title": "Plan", "text": "secret plan"},
        format="json",
        HTTP_IF_NONE_MATCH="*",
    )
    assert response.status_code == 201, response.json()
    return [("document.created", on("plan", KEY, etag(response)))]


def api_replace(d: Doors) -> list[tuple[str, dict[str, Any]]]:
    response = d.api.put(
        f"{DOCS}/workshop{ENV}",
        {"text": "secret two"},
        format="json",
        HTTP_IF_MATCH=f'"{d.workshop.revision}"',
    )
    assert response.status_code == 200, response.json()
    return [("document.updated", on("workshop", KEY, etag(response)))]


def api_delete(d: Doors) -> list[tuple[str, dict[str, Any]]]:
    response = d.api.delete(f"{DOCS}/workshop{ENV}", HTTP_IF_MATCH=f'"{d.workshop.revision}"')
    assert response.status_code == 204
    return [("document.deleted", on("workshop", KEY))]


def api_restore(d: Doors) -> list[tuple[str, dict[str, Any]]]:
    later = document_replace(
        resource=d.notes,
        doc_id="workshop",
        expected_revision=d.workshop.revision,
        text="secret later",
        actor="t",
    )
    forget()
    response = d.api.post(
        f"{DOCS}/workshop/versions/{d.workshop.revision}/restore{ENV}",
        HTTP_IF_MATCH=f'"{later.revision}"',
    )
    assert response.status_code == 200, response.json()
    return [("document.updated", on("workshop", KEY, etag(response)))]


def api_as_of_restore(d: Doors) -> list[tuple[str, dict[str, Any]]]:
    moment = current().updated_at
    document_replace(
        resource=d.notes,
        doc_id="workshop",
        expected_revision=d.workshop.revision,
        text="secret later",
        actor="t",
    )
    forget()
    response = d.api.post(
        f"{API}/memory/notes/restore{ENV}",
        {"asOf": moment.isoformat(), "documents": ["workshop"]},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert current().text == SECRET_TEXT
    return [("document.updated", on("workshop", KEY))]


def api_approve(d: Doors) -> list[tuple[str, dict[str, Any]]]:
    _, proposal_id = proposed_save(d.project)
    forget()
    response = d.api.post(
        f"{API}/memory/proposals/{proposal_id}/approve{ENV}",
        {},
        format="json",
        HTTP_IF_MATCH=f'"{d.workshop.revision}"',
    )
    assert response.status_code == 200, response.json()
    return [("document.updated", on("workshop", KEY, etag(response), proposalId=proposal_id))]


def agent_save(d: Doors) -> list[tuple[str, dict[str, Any]]]:
    session = support_session(d.project)
    forget()
    result = d.agent_save(session, "secret saved")
    assert result["status"] == "saved", result
    actor = f"agent:{session.id}"
    data = on("workshop", actor, result["revision"], session=session.id)
    return [("document.updated", data), ("memory.saved", data)]


def agent_proposal(d: Doors) -> list[tuple[str, dict[str, Any]]]:
    session, proposal_id = proposed_save(d.project)
    queued_now = [event for event, _ in queued()]
    assert queued_now.count("proposal.created") == 1
    data = on(
        "workshop",
        f"agent:{session.id}",
        d.workshop.revision,
        session=session.id,
        proposalId=proposal_id,
        agent="support-bot",
    )
    return [*((e, x) for e, x in queued() if e != "proposal.created"), ("proposal.created", data)]


def session_revert_door(d: Doors) -> list[tuple[str, dict[str, Any]]]:
    session = support_session(d.project)
    d.agent_save(session, "secret saved")
    forget()
    response = d.api.post(f"/api/managed-agents/sessions/{session.id}/revert", {}, format="json")
    assert response.status_code == 200, response.json()
    assert current().text == SECRET_TEXT
    return [("document.updated", on("workshop", KEY))]


def page_create(d: Doors) -> list[tuple[str, dict[str, Any]]]:
    response = d.owner.post(f"{PAGE}new/", {"doc_id": "plan", "title": "Plan", "text": "secret"})
    assert response.status_code == 302
    return [("document.created", on("plan", USER))]


def page_edit(d: Doors) -> list[tuple[str, dict[str, Any]]]:
    # Text and title: two versions, each its own update.
    response = d.owner.post(
        f"{PAGE}documents/workshop/edit/",
        {"revision": d.workshop.revision, "title": "Renamed", "summary": "S", "text": "secret"},
    )
    assert response.status_code == 302
    replaced = current().versions.order_by("id")[1]
    return [
        ("document.updated", on("workshop", USER, replaced.revision)),
        ("document.updated", on("workshop", USER)),
    ]


def page_freeze(d: Doors) -> list[tuple[str, dict[str, Any]]]:
    assert d.owner.post(f"{PAGE}documents/workshop/freeze/").status_code == 302
    frozen = on("workshop", USER)
    assert d.owner.post(f"{PAGE}documents/workshop/unfreeze/").status_code == 302
    return [("document.frozen", frozen), ("document.unfrozen", on("workshop", USER))]


def page_write_mode(d: Doors) -> list[tuple[str, dict[str, Any]]]:
    url = f"{PAGE}documents/workshop/agent-writes/"
    # "Cannot write" asks first: the freeze's confirmation, which freezes.
    assert d.owner.post(url, {"agentWrites": "disabled"}).status_code == 302
    assert queued() == []
    assert d.owner.post(f"{PAGE}documents/workshop/freeze/").status_code == 302
    frozen = on("workshop", USER)
    # From frozen to reviewed: an unfreeze, then a review change (two versions).
    assert d.owner.post(url, {"agentWrites": "review"}).status_code == 302
    unfrozen = current().versions.order_by("-id")[1].revision
    return [
        ("document.frozen", frozen),
        ("document.unfrozen", on("workshop", USER, unfrozen)),
        ("document.updated", on("workshop", USER)),
    ]


def page_bulk(d: Doors) -> list[tuple[str, dict[str, Any]]]:
    document_create(resource=d.notes, doc_id="plan", title="Plan", text="secret", actor="t")
    forget()
    response = d.owner.post(
        f"{PAGE}bulk/", {"action": "freeze", "doc": ["plan", "workshop"], "confirm": "yes"}
    )
    assert response.status_code in (200, 302)
    assert not Document.objects.filter(agent_writes=True).exists()
    return [("document.frozen", on("plan", USER)), ("document.frozen", on("workshop", USER))]


def page_delete(d: Doors) -> list[tuple[str, dict[str, Any]]]:
    response = d.owner.post(
        f"{PAGE}documents/workshop/delete/",
        {"revision": d.workshop.revision, "confirm_id": "workshop"},
    )
    assert response.status_code == 302
    return [("document.deleted", on("workshop", USER))]


def page_restore(d: Doors) -> list[tuple[str, dict[str, Any]]]:
    later = document_replace(
        resource=d.notes,
        doc_id="workshop",
        expected_revision=d.workshop.revision,
        text="secret later",
        actor="t",
    )
    forget()
    response = d.owner.post(
        f"{PAGE}documents/workshop/versions/{d.workshop.revision}/restore/",
        {"revision": later.revision},
    )
    assert response.status_code == 302
    return [("document.updated", on("workshop", USER))]


def cli_writes(d: Doors) -> list[tuple[str, dict[str, Any]]]:
    one, two = d.tmp_path / "one.txt", d.tmp_path / "two.txt"
    one.write_text("secret one")
    two.write_text("secret two")
    cli("create", "notes", "plan", "--title", "Plan", "--text-file", str(one))
    created = on("plan", CLI)
    cli("edit", "notes", "plan", "--text-file", str(two))
    replaced = on("plan", CLI)
    cli("freeze", "notes", "plan")
    frozen = on("plan", CLI)
    cli("freeze", "notes", "plan")  # already frozen: no change, no event
    cli("remove", "notes", "plan", "--yes")
    return [
        ("document.created", created),
        ("document.updated", replaced),
        ("document.frozen", frozen),
        ("document.deleted", on("plan", CLI)),
    ]


def erasure(d: Doors) -> list[tuple[str, dict[str, Any]]]:
    erase_now(d.project, "Node.js 22")
    return [("document.updated", on("workshop", "t"))]


def sessions(d: Doors) -> list[tuple[str, dict[str, Any]]]:
    session = support_session(d.project)
    again = support_session(d.project)  # the same key: the same session, no new event
    assert again.id == session.id
    ended = d.api.post(f"/api/managed-agents/sessions/{session.id}/end", {}, format="json")
    assert ended.status_code in (200, 204), ended.content
    d.api.post(f"/api/managed-agents/sessions/{session.id}/end", {}, format="json")
    created = {"actor": Actor(""), "session": session.id, "agent": "support-bot"}
    return [
        ("session.created", created),
        ("session.ended", {"actor": KEY, "session": session.id, "agent": "support-bot"}),
    ]


DOORS: dict[str, Callable[[Doors], list[tuple[str, dict[str, Any]]]]] = {
    "api create": api_create,
    "api replace": api_replace,
    "api delete": api_delete,
    "api restore": api_restore,
    "api as-of restore": api_as_of_restore,
    "api approve": api_approve,
    "agent save": agent_save,
    "agent proposal": agent_proposal,
    "session revert": session_revert_door,
    "page create": page_create,
    "page edit": page_edit,
    "page freeze": page_freeze,
    "page write mode": page_write_mode,
    "page bulk": page_bulk,
    "page delete": page_delete,
    "page restore": page_restore,
    "cli": cli_writes,
    "erasure": erasure,
    "sessions": sessions,
}


@pytest.mark.parametrize("door", list(DOORS))
def test_each_door_queues_the_events_of_its_change_once(
    api: APIClient,
    owner: Client,
    project: Project,
    notes: Resource,
    workshop: Document,
    listening: None,
    tmp_path: Any,
    door: str,
) -> None:
    forget()
    expected = DOORS[door](Doors(api, owner, project, notes, workshop, tmp_path))
    found = queued()
    assert found == expected
    for delivery in Delivery.objects.all():
        for text in (SECRET_TEXT, "secret", "Node.js"):
            assert text not in delivery.body


def refused_api(d: Doors) -> None:
    stale = '"0000"'
    replace = d.api.put(
        f"{DOCS}/workshop{ENV}", {"text": "secret"}, format="json", HTTP_IF_MATCH=stale
    )
    assert replace.status_code == 412
    create = d.api.put(
        f"{DOCS}/workshop{ENV}", {"title": "T"}, format="json", HTTP_IF_NONE_MATCH="*"
    )
    assert create.status_code == 412
    assert d.api.delete(f"{DOCS}/workshop{ENV}", HTTP_IF_MATCH=stale).status_code == 412
    too_big = d.api.put(
        f"{DOCS}/workshop{ENV}",
        {"text": "x" * (d.notes.max_bytes + 1)},
        format="json",
        HTTP_IF_MATCH=f'"{d.workshop.revision}"',
    )
    assert too_big.status_code in (400, 413), too_big.json()


def refused_approval(d: Doors) -> None:
    _, proposal_id = proposed_save(d.project)
    document_replace(
        resource=d.notes,
        doc_id="workshop",
        expected_revision=d.workshop.revision,
        text="secret owner",
        actor="t",
    )
    forget()
    response = d.api.post(
        f"{API}/memory/proposals/{proposal_id}/approve{ENV}",
        {},
        format="json",
        HTTP_IF_MATCH=f'"{d.workshop.revision}"',
    )
    assert response.status_code == 412


def refused_agent_save(d: Doors) -> None:
    session = support_session(d.project)
    Document.objects.filter(pk=d.workshop.pk).update(agent_writes=False)
    forget()
    assert d.agent_save(session, "secret saved")["status"] != "saved"


def refused_page(d: Doors) -> None:
    response = d.owner.post(
        f"{PAGE}documents/workshop/delete/",
        {"revision": d.workshop.revision, "confirm_id": "worksho"},
    )
    assert response.status_code == 422
    stale = d.owner.post(
        f"{PAGE}documents/workshop/edit/",
        {"revision": "0000", "title": "T", "summary": "", "text": "secret"},
    )
    assert stale.status_code == 409


REFUSED: dict[str, Callable[[Doors], None]] = {
    "api": refused_api,
    "approval": refused_approval,
    "agent save": refused_agent_save,
    "page": refused_page,
}


@pytest.mark.parametrize("door", list(REFUSED))
def test_a_refused_change_queues_nothing(
    api: APIClient,
    owner: Client,
    project: Project,
    notes: Resource,
    workshop: Document,
    listening: None,
    tmp_path: Any,
    door: str,
) -> None:
    forget()
    REFUSED[door](Doors(api, owner, project, notes, workshop, tmp_path))
    assert queued() == []
    assert current().text == SECRET_TEXT or door == "approval"
