"""`manage.py session ...`: create (with --create-document), show, end, events, list."""

from __future__ import annotations

import json
from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from memoryadmin.agents.models import Binding, Session, SessionEvent
from memoryadmin.memory.models import AuditEntry, Document, Project, Resource
from memoryadmin.memory.services.documents import document_delete


def run(*args: str) -> str:
    out = StringIO()
    call_command("session", *args, stdout=out)
    return out.getvalue()


def run_json(*args: str) -> Any:
    return json.loads(run(*args, "--json"))


CREATE = ("create", "--project", "acme", "--agent", "support-bot@development")


def test_create_with_create_document_reports_created_then_existing(
    project: Project, notes: Resource
) -> None:
    args = (*CREATE, "--memory", "notes=workshop", "--memory", "kb", "--create-document")
    first = run_json(*args, "--idempotency-key", "topic/workshop/1")
    assert first["created"] is True
    assert first["documents"] == [{"resource": "notes", "id": "workshop", "created": True}]
    memory = {b["resource"]: b for b in first["session"]["memory"]}
    assert memory["notes"] == {
        "resource": "notes",
        "scope": "document",
        "id": "workshop",
        "access": "read-write",
        "writable": True,
    }
    assert memory["kb"]["scope"] == "collection"
    document = Document.objects.get(resource=notes, doc_id="workshop")
    assert (document.title, document.text) == ("workshop", "")
    again = run_json(*args, "--idempotency-key", "topic/workshop/1")
    assert again["created"] is False
    assert again["documents"] == [{"resource": "notes", "id": "workshop", "created": False}]
    assert again["session"]["id"] == first["session"]["id"]
    assert Session.objects.get().idempotency_key == "topic/workshop/1:session"
    assert Document.objects.filter(resource=notes).count() == 1


def test_create_text_output(project: Project, make_document: Callable[..., Any]) -> None:
    make_document("workshop")
    out = run(*CREATE, "--memory", "notes=workshop:read")
    session = Session.objects.get()
    assert f"session {session.id}: created" in out
    assert "notes  document workshop  read  not writable" in out
    assert Binding.objects.get().access == "read"


def test_agent_without_environment_means_development(
    project: Project, make_document: Callable[..., Any]
) -> None:
    make_document("workshop")
    body = run_json(
        "create", "--project", "acme", "--agent", "support-bot", "--memory", "notes=workshop"
    )
    assert body["session"]["environment"] == "development"
    assert Session.objects.get().environment == "development"


def test_create_without_create_document_fails_on_missing_document(project: Project) -> None:
    with pytest.raises(CommandError, match=r"^memory\.notes: document 'missing' does not exist"):
        run(*CREATE, "--memory", "notes=missing")
    assert not Session.objects.exists()
    assert not Document.objects.exists()


def test_create_document_on_deleted_id_fails_before_the_session(
    project: Project, make_document: Callable[..., Any], notes: Resource
) -> None:
    document = make_document("gone")
    document_delete(resource=notes, doc_id="gone", expected_revision=document.revision, actor="t")
    with pytest.raises(CommandError, match="was deleted"):
        run(*CREATE, "--memory", "notes=gone", "--create-document")
    assert not Session.objects.exists()


@pytest.mark.parametrize(
    ("option", "refusal"),
    [
        (("--idempotency-key", "k" * 249), "--idempotency-key: idempotency keys are 1-248"),
        (("--idempotency-key", "clé"), "--idempotency-key: idempotency keys are 1-248"),
        (("--label", "nolabel"), "--label takes name=value"),
        (("--label", "=empty-name"), "Label names are 1-64"),
    ],
)
def test_create_document_creates_nothing_when_another_input_is_refused(
    project: Project, notes: Resource, option: tuple[str, str], refusal: str
) -> None:
    with pytest.raises(CommandError, match=refusal):
        run(*CREATE, "--memory", "notes=topic", "--create-document", *option)
    assert not Document.objects.exists()
    assert not Session.objects.exists()
    assert not AuditEntry.objects.filter(action="document.create").exists()


def test_bad_access_is_an_error(project: Project, make_document: Callable[..., Any]) -> None:
    make_document("workshop")
    with pytest.raises(CommandError, match="access"):
        run(*CREATE, "--memory", "notes=workshop:write")
    assert not Session.objects.exists()


def test_show_end_events_and_list(project: Project, make_document: Callable[..., Any]) -> None:
    make_document("workshop")
    session_id = run_json(*CREATE, "--memory", "notes=workshop")["session"]["id"]
    shown = run("show", session_id)
    assert f"session {session_id}" in shown
    assert "status      active" in shown
    assert run_json("show", session_id)["status"] == "active"

    assert run("end", session_id).strip() == f"session {session_id}: ended"
    assert run("end", session_id).strip() == f"session {session_id}: was already ended"
    assert Session.objects.get().status == "ended"
    assert AuditEntry.objects.filter(action="session.end", actor__startswith="cli:").count() == 1

    events = run_json("events", session_id)["events"]
    assert [(e["seq"], e["type"]) for e in events] == [(1, "session.created"), (2, "session.ended")]
    assert [e["seq"] for e in run_json("events", session_id, "--after", "1")["events"]] == [2]
    assert "session.ended" in run("events", session_id)
    assert SessionEvent.objects.count() == 2

    listed = run_json("list", "--project", "acme", "--status", "ended")
    assert [s["id"] for s in listed["sessions"]] == [session_id]
    assert run_json("list", "--project", "acme", "--status", "active")["sessions"] == []
    assert session_id in run("list", "--project", "acme")


def test_show_unknown_session_is_an_error(project: Project) -> None:
    with pytest.raises(CommandError, match=r"^No session 'ses_nope'\.$") as raised:
        run("show", "ses_nope")
    assert raised.value.returncode == 3
