"""Reverting a session: what it wrote is undone where nobody wrote after it; documents
others changed since are listed with the merge instead of being overwritten."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from memoryadmin.agents.models import Session
from memoryadmin.agents.services.runtime import recall_create, tool_call
from memoryadmin.agents.services.sessions import session_create
from memoryadmin.memory.models import AuditEntry, Document, DocumentVersion, Project, Resource
from memoryadmin.memory.services.documents import document_replace
from tests.helpers import Keys, freeze, html_of

SESSIONS = "/api/managed-agents/sessions"


@pytest.fixture
def faq(make_document: Any) -> Document:
    kb = Resource.objects.get(resource_id="kb", environment="development")
    document: Document = make_document("faq", resource=kb, text="one\ntwo\nthree\nfour\nfive\n")
    return document


@pytest.fixture
def writer(project: Project, workshop: Document, faq: Document) -> Session:
    """A session bound read-write to notes/workshop and kb/faq."""
    session, _ = session_create(
        project=project,
        agent_id="support-bot@development",
        memory={
            "notes": {"scope": "document", "id": "workshop", "access": "read-write"},
            "kb": {"scope": "document", "id": "faq", "access": "read-write"},
        },
        idempotency_key="writer",
        actor="test",
    )
    return session


def save(session: Session, resource: str, text: str) -> None:
    recall = recall_create(session=session, use=[resource])
    result = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c",
        name="memory_save",
        arguments={"memory": resource, "text": text},
    )
    assert result["status"] == "saved", result


def current(document: Document) -> Document:
    return Document.objects.get(pk=document.pk)


def revert(api: APIClient, session_id: str, body: Any) -> Any:
    return api.post(
        f"{SESSIONS}/{session_id}/revert", data=json.dumps(body), content_type="application/json"
    )


def test_revert_undoes_only_what_nobody_touched_after(
    api: APIClient, writer: Session, workshop: Document, faq: Document
) -> None:
    save(writer, "notes", "Poisoned once.")
    save(writer, "notes", "Poisoned twice.")
    save(writer, "kb", "one\ntwo\nthree\nfour\nFIVE\n")
    owner_edit = document_replace(
        resource=faq.resource,
        doc_id="faq",
        expected_revision=current(faq).revision,
        text="ONE\ntwo\nthree\nfour\nFIVE\n",
        actor="user:olivia",
    )
    dry = revert(api, writer.id, {"dryRun": True})
    assert dry.status_code == 200, dry.json()
    body = dry.json()
    assert body["dryRun"] is True
    by_id = {d["documentId"]: d for d in body["documents"]}
    assert by_id["workshop"]["action"] == "restore"
    assert by_id["workshop"]["restoreRevision"] == workshop.revision
    assert by_id["faq"]["action"] == "conflict"
    assert by_id["faq"]["merged"] == "ONE\ntwo\nthree\nfour\nfive\n"
    assert current(workshop).text == "Poisoned twice."
    assert not AuditEntry.objects.filter(action="session.revert").exists()

    applied = revert(api, writer.id, {})
    assert applied.status_code == 200
    by_id = {d["documentId"]: d for d in applied.json()["documents"]}
    restored = current(workshop)
    assert restored.text == "Exercises must run on Node.js 22."
    assert by_id["workshop"]["revision"] == restored.revision
    assert DocumentVersion.objects.filter(document=workshop).latest("id").action == "restore"
    # The document others changed is left exactly as it was.
    assert current(faq).revision == owner_edit.revision
    entry = AuditEntry.objects.get(action="session.revert")
    assert entry.detail == {"sessionId": writer.id, "restored": ["workshop"], "conflicts": ["faq"]}
    # Reverting again changes nothing more.
    again = {d["documentId"]: d["action"] for d in revert(api, writer.id, {}).json()["documents"]}
    assert again == {"workshop": "unchanged", "faq": "conflict"}


def test_a_freeze_after_the_session_does_not_block_the_revert(
    writer: Session, workshop: Document, api: APIClient
) -> None:
    save(writer, "notes", "Poison.")
    freeze(current(workshop))
    body = revert(api, writer.id, {}).json()
    assert [d["action"] for d in body["documents"]] == ["restore"]
    assert current(workshop).text == "Exercises must run on Node.js 22."
    assert current(workshop).agent_writes is False


def test_revert_needs_a_read_write_key_but_a_dry_run_does_not(
    writer: Session, workshop: Document, client_for: Any, keys: Keys
) -> None:
    save(writer, "notes", "Poison.")
    read_only = client_for(keys.read_only)
    assert revert(read_only, writer.id, {"dryRun": True}).status_code == 200
    assert revert(read_only, writer.id, {}).status_code == 403
    assert revert(client_for(keys.other), writer.id, {"dryRun": True}).status_code == 404
    assert revert(client_for(keys.owner), writer.id, {"dryRun": "yes"}).status_code == 400
    assert revert(client_for(keys.owner), writer.id, {"other": 1}).status_code == 400
    assert current(workshop).text == "Poison."


@pytest.mark.parametrize("body", [{"other": 1}, {"dryRun": "yes"}, {}])
def test_another_projects_key_meets_a_missing_session_whatever_its_body(
    writer: Session, workshop: Document, client_for: Any, keys: Keys, body: dict[str, Any]
) -> None:
    """The session's reach is decided before its body: the answer for another project's
    session is the answer for one that does not exist, and nothing is reverted."""
    save(writer, "notes", "Poison.")
    other = client_for(keys.other)
    found, missing = revert(other, writer.id, body), revert(other, "ses_missing", body)
    assert (found.status_code, missing.status_code) == (404, 404)
    assert found.json() == {"error": {"code": "not_found", "message": f"No session '{writer.id}'."}}
    assert current(workshop).text == "Poison."
    assert not AuditEntry.objects.filter(action__startswith="session.revert").exists()


def test_cli_revert_with_a_dry_run_first(writer: Session, workshop: Document) -> None:
    save(writer, "notes", "Poison.")
    out = StringIO()
    call_command("session", "revert", writer.id, "--dry-run", "--json", stdout=out)
    plan = json.loads(out.getvalue())
    assert plan["dryRun"] is True
    assert [d["action"] for d in plan["documents"]] == ["restore"]
    assert current(workshop).text == "Poison."
    out = StringIO()
    call_command("session", "revert", writer.id, stdout=out)
    assert "workshop  restore" in out.getvalue()
    assert current(workshop).text == "Exercises must run on Node.js 22."
    assert AuditEntry.objects.get(action="session.revert").actor.startswith("cli:")


def test_page_shows_the_plan_then_reverts(
    writer: Session, workshop: Document, owner: Any, web: Any
) -> None:
    save(writer, "notes", "Poison.")
    url = f"/projects/acme/development/sessions/{writer.id}/revert/"
    assert web("viewer").get(url).status_code == 403
    assert web("support").post(url).status_code == 403
    html = html_of(owner.get(url))
    assert "restore version" in html
    assert current(workshop).text == "Poison."
    response = owner.post(url)
    assert response.status_code == 302
    assert response["Location"] == url
    done = html_of(owner.get(url))
    assert "restored version" in done
    # Every document it wrote was restored: no "others" are said to be left as they were.
    assert "Restored 1 of 1 document to the version from before the session.</p>" in done
    assert "the others are listed" not in done
    # A reload shows the plan again (nothing left to restore), and applies nothing.
    again = html_of(owner.get(url))
    assert "already as before" in again
    assert "Revert these documents" not in again
    assert current(workshop).text == "Exercises must run on Node.js 22."
    assert AuditEntry.objects.get(action="session.revert").actor == "user:olivia"
