"""The memory runtime: recall, then memory_save / memory_list / memory_read tool calls."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from memoryadmin.agents.models import Recall, Session, SessionEvent
from memoryadmin.memory.models import AuditEntry, Document, DocumentVersion, Project, Resource
from memoryadmin.memory.services.deployments import resource_get
from memoryadmin.memory.services.documents import (
    document_delete,
    document_list,
    document_replace,
)
from tests.helpers import Keys, freeze, unfreeze

SESSIONS = "/api/managed-agents/sessions"


def post(api: APIClient, url: str, body: Any) -> Any:
    return api.post(url, data=json.dumps(body), content_type="application/json")


def start(api: APIClient, memory: dict[str, Any], key: str = "k") -> str:
    body = {"agentId": "support-bot@development", "memory": memory}
    response = api.post(
        SESSIONS, data=json.dumps(body), content_type="application/json", HTTP_IDEMPOTENCY_KEY=key
    )
    assert response.status_code == 201, response.json()
    return str(response.json()["session"]["id"])


def recall(api: APIClient, session_id: str, use: list[str], text: str | None = "hi") -> Any:
    return post(
        api, f"{SESSIONS}/{session_id}/memory/recall", {"use": use, "input": {"text": text}}
    )


def call(
    api: APIClient, session_id: str, recall_id: str, name: str, arguments: Any, call_id: str = "c1"
) -> Any:
    body = {"recallId": recall_id, "callId": call_id, "name": name, "arguments": arguments}
    return post(api, f"{SESSIONS}/{session_id}/memory/tool-calls", body)


def result(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.json()
    assert set(response.json()) == {"result"}
    return dict(response.json()["result"])


@pytest.fixture
def kb(project: Project) -> Resource:
    return resource_get(project=project, environment="development", resource_id="kb")


RW = {"notes": {"scope": "document", "id": "workshop", "access": "read-write"}}


@pytest.fixture
def session_id(api: APIClient, workshop: Document) -> str:
    return start(api, RW)


@pytest.fixture
def recall_id(api: APIClient, session_id: str) -> str:
    response = recall(api, session_id, ["notes"])
    assert response.status_code == 200
    return str(response.json()["recallId"])


# Recall.


def test_recall_of_a_document_binding(api: APIClient, session_id: str, workshop: Document) -> None:
    response = recall(api, session_id, ["notes"])
    assert response.status_code == 200
    body = response.json()
    assert body["recallId"].startswith("mrq_")
    assert body["memory"] == {
        "notes": {
            "text": "Exercises must run on Node.js 22.",
            "sources": [
                {
                    "id": "workshop",
                    "title": "Workshop",
                    "revision": workshop.revision,
                    "updatedAt": body["memory"]["notes"]["sources"][0]["updatedAt"],
                }
            ],
            "writable": True,
        }
    }
    assert [tool["name"] for tool in body["tools"]] == ["memory_save"]
    stored = Recall.objects.get(pk=body["recallId"])
    assert stored.session_id == session_id
    assert stored.use == ["notes"]
    assert stored.revisions == {"notes": workshop.revision}
    assert stored.memory == body["memory"]


def test_recall_of_an_empty_document_has_empty_text_and_a_source(
    api: APIClient, make_document: Callable[..., Any]
) -> None:
    make_document("blank")
    session_id = start(api, {"notes": {"scope": "document", "id": "blank"}})
    body = recall(api, session_id, []).json()
    assert body["memory"]["notes"]["text"] == ""
    assert [s["id"] for s in body["memory"]["notes"]["sources"]] == ["blank"]
    assert body["memory"]["notes"]["writable"] is False


def test_recall_reads_every_binding_but_offers_tools_of_use_only(
    api: APIClient, workshop: Document, make_document: Callable[..., Any], kb: Resource
) -> None:
    make_document("refunds", resource=kb, title="Refunds", summary="30 days.")
    session_id = start(api, {**RW, "kb": {"scope": "collection"}})
    none = recall(api, session_id, []).json()
    assert set(none["memory"]) == {"notes", "kb"}
    assert none["tools"] == []
    only_kb = recall(api, session_id, ["kb"]).json()
    assert [tool["name"] for tool in only_kb["tools"]] == ["memory_list", "memory_read"]
    both = recall(api, session_id, ["notes", "kb"]).json()
    assert [tool["name"] for tool in both["tools"]] == [
        "memory_save",
        "memory_list",
        "memory_read",
    ]
    assert Recall.objects.filter(session_id=session_id).count() == 3


def test_tool_definitions_name_eligible_resources_and_their_descriptions(
    api: APIClient, workshop: Document, make_document: Callable[..., Any], kb: Resource
) -> None:
    make_document("faq", resource=kb)
    session_id = start(
        api, {**RW, "kb": {"scope": "document", "id": "faq", "access": "read-write"}}
    )
    save = recall(api, session_id, ["notes", "kb"]).json()["tools"][0]
    assert save["name"] == "memory_save"
    assert "notes: Workshop requirements and decisions." in save["description"]
    assert "kb: Product knowledge." in save["description"]
    schema = save["inputSchema"]
    assert schema["required"] == ["memory", "text"]
    assert schema["properties"]["memory"]["enum"] == ["notes", "kb"]
    assert schema["additionalProperties"] is False
    single = recall(api, session_id, ["notes"]).json()["tools"][0]
    assert single["inputSchema"]["required"] == ["text"]
    assert "kb" not in single["description"]


def test_read_binding_offers_no_tools(api: APIClient, workshop: Document) -> None:
    session_id = start(api, {"notes": {"scope": "document", "id": "workshop"}})
    body = recall(api, session_id, ["notes"]).json()
    assert body["tools"] == []
    assert body["memory"]["notes"]["writable"] is False


def test_recall_of_unbound_resource_is_400_not_bound(api: APIClient, session_id: str) -> None:
    response = recall(api, session_id, ["notes", "kb"])
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "not_bound"
    assert "kb" in response.json()["error"]["message"]
    assert not Recall.objects.exists()


def test_recall_with_deleted_bound_document_fails_and_stores_nothing(
    api: APIClient, session_id: str, workshop: Document, notes: Resource
) -> None:
    document_delete(
        resource=notes, doc_id="workshop", expected_revision=workshop.revision, actor="t"
    )
    response = recall(api, session_id, [])
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "recall_failed"
    assert error["details"] == {"resource": "notes", "reason": "not_found"}
    assert not Recall.objects.exists()


def test_recall_on_ended_session_is_409(api: APIClient, session_id: str) -> None:
    api.post(f"{SESSIONS}/{session_id}/end")
    response = recall(api, session_id, ["notes"])
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "session_closed"
    assert not Recall.objects.exists()


def test_recall_after_freeze_is_not_writable(
    api: APIClient, session_id: str, workshop: Document, notes: Resource
) -> None:
    freeze(workshop)
    body = recall(api, session_id, ["notes"]).json()
    assert body["memory"]["notes"]["writable"] is False
    assert [tool["name"] for tool in body["tools"]] == ["memory_save"]


@pytest.mark.parametrize(
    "body",
    [{"use": "notes"}, {"use": [1]}, {"input": {"text": 1}}, {"input": {"other": ""}}, {"x": 1}],
)
def test_malformed_recall_is_400(api: APIClient, session_id: str, body: Any) -> None:
    response = post(api, f"{SESSIONS}/{session_id}/memory/recall", body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert not Recall.objects.exists()


def test_recall_needs_a_read_write_key(
    client_for: Callable[[str | None], APIClient], keys: Keys, session_id: str
) -> None:
    response = recall(client_for(keys.read_only), session_id, [])
    assert response.status_code == 403
    assert not Recall.objects.exists()


# Collections.


def _collection_session(api: APIClient) -> str:
    return start(api, {"notes": {"scope": "collection"}}, key="collection")


def _age(notes: Resource, doc_id: str, days: int) -> None:
    Document.objects.filter(resource=notes, doc_id=doc_id).update(
        updated_at=timezone.now() - timedelta(days=days)
    )


def test_collection_overview_lines_newest_first(
    api: APIClient, make_document: Callable[..., Any], notes: Resource
) -> None:
    make_document("old", title="Old notes", summary="From before.")
    make_document("new", title="New notes", summary="Line one\nline two")
    _age(notes, "old", 3)
    old_day = Document.objects.get(doc_id="old").updated_at.date().isoformat()
    new_day = Document.objects.get(doc_id="new").updated_at.date().isoformat()
    body = recall(api, _collection_session(api), ["notes"]).json()
    overview = body["memory"]["notes"]
    assert overview["text"].split("\n") == [
        f"new | New notes | Line one line two | {new_day}",
        f"old | Old notes | From before. | {old_day}",
    ]
    assert [s["id"] for s in overview["sources"]] == ["new", "old"]
    assert overview["writable"] is False


def test_empty_collection_overview(api: APIClient, notes: Resource) -> None:
    body = recall(api, _collection_session(api), ["notes"]).json()
    assert body["memory"]["notes"] == {"text": "", "sources": [], "writable": False}


def test_collection_overview_keeps_at_most_50_entries(
    api: APIClient, make_document: Callable[..., Any]
) -> None:
    for i in range(52):
        make_document(f"d{i:02d}")
    overview = recall(api, _collection_session(api), ["notes"]).json()["memory"]["notes"]
    assert len(overview["text"].splitlines()) == 50
    assert len(overview["sources"]) == 50


def test_collection_overview_keeps_whole_entries_within_16_kib(
    api: APIClient, make_document: Callable[..., Any]
) -> None:
    for i in range(40):
        make_document(f"d{i:02d}", title="T" * 240, summary="é" * 120)
    overview = recall(api, _collection_session(api), ["notes"]).json()["memory"]["notes"]
    lines = overview["text"].split("\n")
    size = len(overview["text"].encode())
    line_size = len(lines[0].encode())
    assert size <= 16 * 1024
    assert size + 1 + line_size > 16 * 1024  # one more entry would not fit
    assert all(line.count(" | ") == 3 and line.endswith(lines[0][-10:]) for line in lines)
    assert len(overview["sources"]) == len(lines) < 40


# memory_save.


def test_save_commits_version_event_and_audit(
    api: APIClient, session_id: str, recall_id: str, workshop: Document
) -> None:
    saved = result(call(api, session_id, recall_id, "memory_save", {"text": "Node.js 24 now."}))
    stored = Document.objects.get(pk=workshop.pk)
    assert saved == {"status": "saved", "revision": stored.revision, "bytes": 15}
    assert (stored.text, stored.summary) == ("Node.js 24 now.", "Runtime.")
    assert (stored.writer_kind, stored.writer_session_id) == ("agent", session_id)
    version = DocumentVersion.objects.filter(document=workshop).latest("id")
    assert (version.action, version.writer_kind, version.writer_session_id) == (
        "save",
        "agent",
        session_id,
    )
    assert version.revision == stored.revision
    event = SessionEvent.objects.get(session_id=session_id, type="memory.saved")
    assert event.seq == 2
    assert event.data == {
        "resource": "notes",
        "documentId": "workshop",
        "revision": stored.revision,
        "bytes": 15,
    }
    assert AuditEntry.objects.filter(action="document.save", actor=f"agent:{session_id}").exists()
    document = api.get(
        "/api/managed-agents/projects/acme/memory/notes/documents/workshop?environment=development"
    ).json()
    assert document["writer"] == {"kind": "agent", "sessionId": session_id}


def test_save_with_summary_sets_it_and_empty_clears_it(
    api: APIClient, session_id: str, workshop: Document
) -> None:
    first = recall(api, session_id, ["notes"]).json()["recallId"]
    args = {"memory": "notes", "text": "a", "summary": "New."}
    assert result(call(api, session_id, first, "memory_save", args))["status"] == "saved"
    assert Document.objects.get(pk=workshop.pk).summary == "New."
    second = recall(api, session_id, ["notes"]).json()["recallId"]
    assert result(call(api, session_id, second, "memory_save", {"text": "b", "summary": ""}))[
        "status"
    ] == ("saved")
    assert Document.objects.get(pk=workshop.pk).summary == ""


def test_second_save_in_the_same_recall_conflicts(
    api: APIClient, session_id: str, recall_id: str, workshop: Document
) -> None:
    first = result(call(api, session_id, recall_id, "memory_save", {"text": "one", "summary": "1"}))
    assert first["status"] == "saved"
    second = result(call(api, session_id, recall_id, "memory_save", {"text": "two"}, "c2"))
    assert second == {"status": "conflict", "text": "one", "summary": "1"}
    assert Document.objects.get(pk=workshop.pk).text == "one"
    assert SessionEvent.objects.filter(type="memory.saved").count() == 1


def test_owner_edit_after_recall_makes_save_conflict(
    api: APIClient, session_id: str, recall_id: str, workshop: Document, notes: Resource
) -> None:
    document_replace(
        resource=notes,
        doc_id="workshop",
        expected_revision=workshop.revision,
        text="Owner text.",
        actor="t",
    )
    outcome = result(call(api, session_id, recall_id, "memory_save", {"text": "agent"}))
    assert outcome == {"status": "conflict", "text": "Owner text.", "summary": "Runtime."}
    assert Document.objects.get(pk=workshop.pk).text == "Owner text."
    # The next render reads the current notes and its save succeeds.
    fresh = recall(api, session_id, ["notes"]).json()
    assert fresh["memory"]["notes"]["text"] == "Owner text."
    retried = result(call(api, session_id, fresh["recallId"], "memory_save", {"text": "merged"}))
    assert retried["status"] == "saved"
    assert Document.objects.get(pk=workshop.pk).text == "merged"


@pytest.mark.django_db(transaction=True)
def test_refused_and_conflicting_saves_in_their_own_transactions_write_nothing(
    api: APIClient, keys: Keys, workshop: Document, notes: Resource
) -> None:
    # Real transactions (not the test's savepoints): a save that raises inside the
    # transaction holding the session's lock rolls it back whole, and the conflict's
    # current text is read after it.
    session_id = start(api, RW)
    recall_id = recall(api, session_id, ["notes"]).json()["recallId"]
    saved = result(call(api, session_id, recall_id, "memory_save", {"text": "one"}))
    assert saved["status"] == "saved"
    stale = result(call(api, session_id, recall_id, "memory_save", {"text": "two"}, "c2"))
    assert stale == {"status": "conflict", "text": "one", "summary": "Runtime."}
    fresh = recall(api, session_id, ["notes"]).json()["recallId"]
    big = "x" * (notes.max_bytes + 1)
    too_large = result(call(api, session_id, fresh, "memory_save", {"text": big}, "c3"))
    assert (too_large["status"], too_large["reason"]) == ("rejected", "too_large")
    freeze(Document.objects.get(pk=workshop.pk))
    frozen = result(call(api, session_id, fresh, "memory_save", {"text": "three"}, "c4"))
    assert frozen == {"status": "rejected", "reason": "agent_writes_disabled"}
    document = Document.objects.get(pk=workshop.pk)
    assert document.text == "one"
    assert DocumentVersion.objects.filter(document=document, action="save").count() == 1
    events = list(
        SessionEvent.objects.filter(session_id=session_id)
        .order_by("seq")
        .values_list("seq", "type")
    )
    assert events == [(1, "session.created"), (2, "memory.saved")]
    assert Session.objects.get(pk=session_id).last_seq == 2
    # Unfrozen, the session saves again on the current revision.
    unfreeze(document)
    current = recall(api, session_id, ["notes"]).json()["recallId"]
    again = result(call(api, session_id, current, "memory_save", {"text": "four"}, "c5"))
    assert again["status"] == "saved"
    assert Session.objects.get(pk=session_id).last_seq == 3


def test_save_on_frozen_document_is_rejected(
    api: APIClient, session_id: str, recall_id: str, workshop: Document, notes: Resource
) -> None:
    frozen = freeze(workshop)
    outcome = result(call(api, session_id, recall_id, "memory_save", {"text": "x"}))
    assert outcome == {"status": "rejected", "reason": "agent_writes_disabled"}
    # Frozen wins over stale: even with the current revision the save is refused.
    fresh = recall(api, session_id, ["notes"]).json()["recallId"]
    again = result(call(api, session_id, fresh, "memory_save", {"text": "x"}))
    assert again == {"status": "rejected", "reason": "agent_writes_disabled"}
    assert Document.objects.get(pk=workshop.pk).revision == frozen.revision
    assert not SessionEvent.objects.filter(type="memory.saved").exists()


def test_save_on_deleted_document_is_rejected_not_found(
    api: APIClient, session_id: str, recall_id: str, workshop: Document, notes: Resource
) -> None:
    document_delete(
        resource=notes, doc_id="workshop", expected_revision=workshop.revision, actor="t"
    )
    outcome = result(call(api, session_id, recall_id, "memory_save", {"text": "x"}))
    assert outcome == {"status": "rejected", "reason": "not_found"}
    assert Document.objects.get(pk=workshop.pk).text == ""


def test_save_after_session_end_is_rejected_session_closed(
    api: APIClient, session_id: str, recall_id: str, workshop: Document
) -> None:
    assert api.post(f"{SESSIONS}/{session_id}/end").status_code == 200
    outcome = result(call(api, session_id, recall_id, "memory_save", {"text": "x"}))
    assert outcome == {"status": "rejected", "reason": "session_closed"}
    assert Document.objects.get(pk=workshop.pk).revision == workshop.revision


@pytest.mark.parametrize(
    ("arguments", "field", "size", "limit"),
    [
        ({"text": "x" * 65}, "text", 65, 64),
        ({"text": "ok", "summary": "é" * 121}, "summary", 242, 240),
    ],
)
def test_save_over_a_limit_is_rejected_too_large(
    api: APIClient,
    make_document: Callable[..., Any],
    kb: Resource,
    arguments: dict[str, str],
    field: str,
    size: int,
    limit: int,
) -> None:
    document = make_document("faq", resource=kb, text="short")
    session_id = start(api, {"kb": {"scope": "document", "id": "faq", "access": "read-write"}})
    recall_id = recall(api, session_id, ["kb"]).json()["recallId"]
    outcome = result(call(api, session_id, recall_id, "memory_save", arguments))
    assert outcome == {
        "status": "rejected",
        "reason": "too_large",
        "field": field,
        "bytes": size,
        "maxBytes": limit,
    }
    assert Document.objects.get(pk=document.pk).text == "short"


def test_save_at_the_limit_is_saved(
    api: APIClient, make_document: Callable[..., Any], kb: Resource
) -> None:
    make_document("faq", resource=kb)
    session_id = start(api, {"kb": {"scope": "document", "id": "faq", "access": "read-write"}})
    recall_id = recall(api, session_id, ["kb"]).json()["recallId"]
    outcome = result(call(api, session_id, recall_id, "memory_save", {"text": "é" * 32}))
    assert (outcome["status"], outcome["bytes"]) == ("saved", 64)


def test_save_to_a_resource_the_render_did_not_select_is_not_bound(
    api: APIClient, workshop: Document, make_document: Callable[..., Any], kb: Resource
) -> None:
    make_document("faq", resource=kb)
    session_id = start(
        api, {**RW, "kb": {"scope": "document", "id": "faq", "access": "read-write"}}
    )
    recall_id = recall(api, session_id, ["notes"]).json()["recallId"]
    for target in ("kb", "nope"):
        outcome = result(
            call(api, session_id, recall_id, "memory_save", {"memory": target, "text": "x"})
        )
        assert outcome == {"status": "rejected", "reason": "not_bound", "bound": ["notes"]}
    assert Document.objects.get(doc_id="faq").text == ""


def test_save_to_a_read_only_binding_is_read_only(
    api: APIClient, workshop: Document, make_document: Callable[..., Any], kb: Resource
) -> None:
    make_document("faq", resource=kb)
    session_id = start(api, {**RW, "kb": {"scope": "document", "id": "faq"}})
    recall_id = recall(api, session_id, ["notes", "kb"]).json()["recallId"]
    outcome = result(call(api, session_id, recall_id, "memory_save", {"memory": "kb", "text": "x"}))
    assert outcome == {"status": "rejected", "reason": "read_only", "bound": ["notes"]}
    only_read = start(api, {"notes": {"scope": "document", "id": "workshop"}}, key="read")
    read_recall = recall(api, only_read, ["notes"]).json()["recallId"]
    outcome = result(call(api, only_read, read_recall, "memory_save", {"text": "x"}))
    assert outcome == {"status": "rejected", "reason": "read_only", "bound": []}
    assert Document.objects.get(pk=workshop.pk).text == workshop.text


def test_save_without_memory_when_two_resources_offer_it_is_a_tool_error(
    api: APIClient, workshop: Document, make_document: Callable[..., Any], kb: Resource
) -> None:
    make_document("faq", resource=kb)
    session_id = start(
        api, {**RW, "kb": {"scope": "document", "id": "faq", "access": "read-write"}}
    )
    recall_id = recall(api, session_id, ["notes", "kb"]).json()["recallId"]
    response = call(api, session_id, recall_id, "memory_save", {"text": "x"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_tool_arguments"
    assert "notes, kb" in response.json()["error"]["message"]
    targeted = result(
        call(api, session_id, recall_id, "memory_save", {"memory": "kb", "text": "x"})
    )
    assert targeted["status"] == "saved"
    assert Document.objects.get(doc_id="faq").text == "x"
    assert Document.objects.get(pk=workshop.pk).text == workshop.text


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"text": 5},
        {"text": None},
        {"text": "x", "summary": 1},
        {"text": "x", "title": "New title"},
        {"text": "x", "memory": ["notes"]},
        ["x"],
        "x",
    ],
)
def test_malformed_save_arguments_are_400(
    api: APIClient, session_id: str, recall_id: str, workshop: Document, arguments: Any
) -> None:
    response = call(api, session_id, recall_id, "memory_save", arguments)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_tool_arguments"
    assert Document.objects.get(pk=workshop.pk).revision == workshop.revision
    assert not SessionEvent.objects.filter(type="memory.saved").exists()


def test_unknown_tool_is_400(api: APIClient, session_id: str, recall_id: str) -> None:
    response = call(api, session_id, recall_id, "memory_delete", {})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


@pytest.mark.parametrize(
    "body",
    [
        {"callId": "c", "name": "memory_save", "arguments": {"text": "x"}},
        {"recallId": "r", "name": "memory_save", "arguments": {"text": "x"}},
        {"recallId": "r", "callId": "c" * 257, "name": "memory_save"},
        {"recallId": "r", "callId": "c", "name": "memory_save", "extra": 1},
    ],
)
def test_malformed_tool_call_body_is_400(
    api: APIClient, session_id: str, recall_id: str, body: dict[str, Any]
) -> None:
    body = {k: (recall_id if v == "r" else v) for k, v in body.items()}
    response = post(api, f"{SESSIONS}/{session_id}/memory/tool-calls", body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


def test_recall_of_another_session_is_404(
    api: APIClient, session_id: str, recall_id: str, workshop: Document
) -> None:
    other = start(api, RW, key="other")
    response = call(api, other, recall_id, "memory_save", {"text": "x"})
    assert response.status_code == 404
    assert call(api, session_id, "mrq_nope", "memory_save", {"text": "x"}).status_code == 404
    assert Document.objects.get(pk=workshop.pk).revision == workshop.revision


def test_tool_calls_need_a_read_write_key(
    client_for: Callable[[str | None], APIClient],
    keys: Keys,
    session_id: str,
    recall_id: str,
    workshop: Document,
) -> None:
    reader = client_for(keys.read_only)
    response = call(reader, session_id, recall_id, "memory_save", {"text": "x"})
    assert response.status_code == 403
    assert Document.objects.get(pk=workshop.pk).revision == workshop.revision


# memory_read and memory_list.


@pytest.fixture
def collection(
    api: APIClient, make_document: Callable[..., Any], notes: Resource
) -> tuple[str, str]:
    """(recall id, session id) of a session bound to the notes collection."""
    make_document("workshop", text="Node.js 22.", summary="Runtime.", title="Workshop notes")
    make_document("onboarding", text="Steps.", title="Onboarding")
    session_id = _collection_session(api)
    return str(recall(api, session_id, ["notes"]).json()["recallId"]), session_id


def test_memory_read_returns_the_document(api: APIClient, collection: tuple[str, str]) -> None:
    recall_id, session_id = collection
    document = Document.objects.get(doc_id="workshop")
    outcome = result(call(api, session_id, recall_id, "memory_read", {"id": "workshop"}))
    assert outcome == {
        "id": "workshop",
        "title": "Workshop notes",
        "text": "Node.js 22.",
        "summary": "Runtime.",
        "revision": document.revision,
        "updatedAt": outcome["updatedAt"],
    }
    assert outcome["updatedAt"].endswith("Z")


def test_memory_read_of_missing_or_deleted_is_not_found(
    api: APIClient, collection: tuple[str, str], notes: Resource
) -> None:
    recall_id, session_id = collection
    onboarding = Document.objects.get(doc_id="onboarding")
    document_delete(
        resource=notes, doc_id="onboarding", expected_revision=onboarding.revision, actor="t"
    )
    for doc_id in ("nope", "onboarding", "bad id!"):
        outcome = result(call(api, session_id, recall_id, "memory_read", {"id": doc_id}))
        assert outcome == {"status": "rejected", "reason": "not_found"}


@pytest.mark.parametrize("arguments", [{}, {"id": 3}, {"id": "x", "text": "y"}])
def test_malformed_read_arguments_are_400(
    api: APIClient, collection: tuple[str, str], arguments: Any
) -> None:
    recall_id, session_id = collection
    response = call(api, session_id, recall_id, "memory_read", arguments)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_tool_arguments"


def test_memory_list_pages_without_text(
    api: APIClient, collection: tuple[str, str], make_document: Callable[..., Any], notes: Resource
) -> None:
    recall_id, session_id = collection
    for i in range(50):
        make_document(f"extra-{i:02d}")
    first = result(call(api, session_id, recall_id, "memory_list", {}))
    assert len(first["documents"]) == 50
    assert set(first["documents"][0]) == {"id", "title", "summary", "revision", "updatedAt"}
    assert first["nextCursor"]
    second = result(
        call(api, session_id, recall_id, "memory_list", {"cursor": first["nextCursor"]})
    )
    assert second["nextCursor"] is None
    seen = [d["id"] for d in first["documents"] + second["documents"]]
    assert sorted(seen) == sorted(
        Document.objects.filter(resource=notes).values_list("doc_id", flat=True)
    )
    with_null = result(call(api, session_id, recall_id, "memory_list", {"cursor": None}))
    assert with_null["documents"] == first["documents"]


def test_memory_list_with_a_bad_or_foreign_cursor_is_invalid_cursor(
    api: APIClient, collection: tuple[str, str], kb: Resource, make_document: Callable[..., Any]
) -> None:
    recall_id, session_id = collection
    for i in range(51):
        make_document(f"k{i}", resource=kb)
    _, foreign = document_list(resource=kb)
    assert foreign is not None
    for cursor in ("garbage", foreign):
        outcome = result(call(api, session_id, recall_id, "memory_list", {"cursor": cursor}))
        assert outcome == {"status": "rejected", "reason": "invalid_cursor"}


def test_collection_tools_on_a_document_binding_are_not_bound(
    api: APIClient, session_id: str, recall_id: str
) -> None:
    outcome = result(call(api, session_id, recall_id, "memory_read", {"id": "workshop"}))
    assert outcome == {"status": "rejected", "reason": "not_bound", "bound": []}
    outcome = result(call(api, session_id, recall_id, "memory_list", {"memory": "notes"}))
    assert outcome == {"status": "rejected", "reason": "not_bound", "bound": []}


def test_collection_tools_after_end_are_session_closed(
    api: APIClient, collection: tuple[str, str]
) -> None:
    recall_id, session_id = collection
    api.post(f"{SESSIONS}/{session_id}/end")
    outcome = result(call(api, session_id, recall_id, "memory_read", {"id": "workshop"}))
    assert outcome == {"status": "rejected", "reason": "session_closed"}
    outcome = result(call(api, session_id, recall_id, "memory_list", {}))
    assert outcome == {"status": "rejected", "reason": "session_closed"}
    assert Session.objects.get(pk=session_id).status == "ended"
