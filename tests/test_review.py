"""Review instead of trust: agent saves under review become proposals that owners
approve, edit then approve, or reject, through the API, the Memory page and the CLI."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from memoryadmin.agents.models import Session
from memoryadmin.agents.services.runtime import recall_create, tool_call
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.memory.models import AuditEntry, Document, DocumentVersion, Project, Proposal
from memoryadmin.memory.services.deployments import deployment_create, resource_get
from memoryadmin.memory.services.documents import document_patch, document_replace
from memoryadmin.memory.services.proposals import changed_bytes
from tests.helpers import DEV, DOCS, MANIFEST_MEMORY, Keys, html_of, unfreeze

PROPOSALS = "/api/managed-agents/projects/acme/memory/proposals"


def deploy_review(project: Project, **provider: Any) -> None:
    """Promotes support-bot with notes under review (plus `provider` settings)."""
    notes = {**MANIFEST_MEMORY[0]}
    notes["provider"] = {**notes["provider"], "agentWrites": "review", **provider}
    deployment_create(
        project=project,
        agent="support-bot",
        memory=[notes, MANIFEST_MEMORY[1]],
        promote="development",
        actor="test",
    )


def save(session: Session, text: str, *, call_id: str = "c1") -> dict[str, Any]:
    recall = recall_create(session=session, use=["notes"])
    return tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id=call_id,
        name="memory_save",
        arguments={"memory": "notes", "text": text},
    )


def current(document: Document) -> Document:
    return Document.objects.get(pk=document.pk)


def approve(
    api: APIClient, proposal_id: str, revision: str, body: dict[str, Any] | None = None
) -> Any:
    return api.post(
        f"{PROPOSALS}/{proposal_id}/approve{DEV}",
        data=json.dumps(body or {}),
        content_type="application/json",
        HTTP_IF_MATCH=f'"{revision}"',
    )


def reject(api: APIClient, proposal_id: str, body: Any) -> Any:
    return api.post(
        f"{PROPOSALS}/{proposal_id}/reject{DEV}",
        data=json.dumps(body),
        content_type="application/json",
    )


@pytest.fixture
def reviewed(project: Project, session: Session) -> Session:
    """The support-bot session, with notes under review from the manifest."""
    deploy_review(project)
    return session


# memory_save under review.


def test_save_under_review_proposes_and_changes_nothing(
    reviewed: Session, workshop: Document, api: APIClient
) -> None:
    result = save(reviewed, "Node.js 24 from now on.", call_id="call-7")
    assert result["status"] == "proposed"
    proposal = Proposal.objects.get(pk=result["proposalId"])
    assert set(result) == {"status", "proposalId"}
    assert (proposal.text, proposal.base_revision, proposal.session_id) == (
        "Node.js 24 from now on.",
        workshop.revision,
        reviewed.id,
    )
    assert proposal.call_id == "call-7"
    assert proposal.recall_id.startswith("mrq_")
    assert current(workshop).revision == workshop.revision
    assert current(workshop).text == "Exercises must run on Node.js 22."
    assert DocumentVersion.objects.filter(document=workshop).count() == 1
    # The recall shows the current text, not the proposal.
    recalled = recall_create(session=reviewed, use=["notes"])
    assert recalled["memory"]["notes"]["text"] == "Exercises must run on Node.js 22."
    # The API shows the document's mode and lists the proposal.
    body = api.get(f"{DOCS}/workshop{DEV}").json()
    assert body["agentWrites"] == "review"
    listed = api.get(f"{PROPOSALS}{DEV}").json()
    assert [p["id"] for p in listed["proposals"]] == [proposal.id]
    assert listed["proposals"][0]["currentRevision"] == workshop.revision
    assert AuditEntry.objects.filter(action="proposal.create").count() == 1


def test_a_stale_save_under_review_is_a_conflict_not_a_proposal(
    reviewed: Session, workshop: Document
) -> None:
    recall = recall_create(session=reviewed, use=["notes"])
    document_replace(
        resource=workshop.resource,
        doc_id="workshop",
        expected_revision=workshop.revision,
        text="Owner text.",
        actor="t",
    )
    result = tool_call(
        session=reviewed,
        recall_id=recall["recallId"],
        call_id="c",
        name="memory_save",
        arguments={"text": "Agent text."},
    )
    assert result == {"status": "conflict", "text": "Owner text.", "summary": "Runtime."}
    assert not Proposal.objects.exists()


def test_review_per_document_through_patch(
    api: APIClient, session: Session, workshop: Document
) -> None:
    response = api.patch(
        f"{DOCS}/workshop{DEV}",
        data=json.dumps({"agentWrites": "review"}),
        content_type="application/json",
        HTTP_IF_MATCH=f'"{workshop.revision}"',
    )
    assert response.status_code == 200, response.json()
    assert response.json()["agentWrites"] == "review"
    assert current(workshop).agent_review is True
    assert save(session, "Proposed.")["status"] == "proposed"
    # Enabled on the document: saves go through again.
    response = api.patch(
        f"{DOCS}/workshop{DEV}",
        data=json.dumps({"agentWrites": "enabled"}),
        content_type="application/json",
        HTTP_IF_MATCH=f'"{response.json()["revision"]}"',
    )
    assert response.json()["agentWrites"] == "enabled"
    assert save(session, "Saved.")["status"] == "saved"
    assert current(workshop).text == "Saved."


def test_disabled_wins_over_review_and_unfreeze_returns_to_review(
    reviewed: Session, workshop: Document, api: APIClient
) -> None:
    frozen = document_patch(
        resource=workshop.resource,
        doc_id="workshop",
        expected_revision=workshop.revision,
        agent_writes=False,
        actor="t",
    )
    assert save(reviewed, "x") == {"status": "rejected", "reason": "agent_writes_disabled"}
    unfreeze(frozen)
    assert api.get(f"{DOCS}/workshop{DEV}").json()["agentWrites"] == "review"
    assert save(reviewed, "x")["status"] == "proposed"


def test_policy_reviews_large_changes_and_prefixed_ids_only(
    project: Project, session: Session, workshop: Document, make_document: Any
) -> None:
    deploy_review(project, reviewPolicy={"overBytes": 10, "idPrefixes": ["shared-"]})
    small = save(session, "Exercises must run on Node.js 24.")
    assert small["status"] == "saved"
    large = save(session, "Exercises must run on Node.js 24, and on Deno 2 as well.")
    assert large["status"] == "proposed"
    assert changed_bytes("abc", "abXc") == 1
    assert changed_bytes("same", "same") == 0
    assert changed_bytes("héllo", "hello") == 2


@pytest.mark.parametrize(
    "provider",
    [
        {"agentWrites": "sometimes"},
        {"reviewPolicy": {"overBytes": 3}},
        {"agentWrites": "review", "reviewPolicy": {}},
        {"agentWrites": "review", "reviewPolicy": {"overBytes": -1}},
        {"agentWrites": "review", "reviewPolicy": {"idPrefixes": ["bad prefix"]}},
        {"agentWrites": "review", "reviewPolicy": {"other": 1}},
    ],
)
def test_bad_review_settings_in_a_manifest_are_refused(
    project: Project, provider: dict[str, Any]
) -> None:
    declaration = {**MANIFEST_MEMORY[0], "provider": {"kind": "document", **provider}}
    with pytest.raises(InvalidRequest):
        deployment_create(project=project, agent="support-bot", memory=[declaration], actor="t")


# Approve and reject through the API.


def test_approve_writes_the_proposal_with_its_provenance(
    reviewed: Session, workshop: Document, api: APIClient
) -> None:
    proposal_id = save(reviewed, "Node.js 24.", call_id="call-9")["proposalId"]
    response = approve(api, proposal_id, workshop.revision)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["text"] == "Node.js 24."
    assert body["writer"] == {"kind": "agent", "sessionId": reviewed.id}
    assert response["ETag"] == f'"{body["revision"]}"'
    proposal = Proposal.objects.get(pk=proposal_id)
    assert (proposal.state, proposal.applied_revision) == ("approved", body["revision"])
    assert proposal.decided_by.startswith("key:")
    version = DocumentVersion.objects.get(document=workshop, revision=body["revision"])
    assert version.action == "approve"
    assert version.origin["proposalId"] == proposal_id
    assert version.origin["callId"] == "call-9"
    assert version.origin["actor"].startswith("key:")
    versions = api.get(f"{DOCS}/workshop/versions{DEV}").json()["versions"]
    assert versions[0]["origin"]["proposalId"] == proposal_id
    assert AuditEntry.objects.filter(action="proposal.approve").count() == 1
    # Decided once: a second approval is a conflict and writes nothing.
    again = approve(api, proposal_id, body["revision"])
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "proposal_decided"
    assert current(workshop).revision == body["revision"]


def test_approve_with_edited_text_is_an_owner_write(
    reviewed: Session, workshop: Document, api: APIClient
) -> None:
    proposal_id = save(reviewed, "Node.js 24.")["proposalId"]
    response = approve(api, proposal_id, workshop.revision, {"text": "Node.js 24 (LTS)."})
    assert response.status_code == 200, response.json()
    assert response.json()["text"] == "Node.js 24 (LTS)."
    assert response.json()["writer"] == {"kind": "owner"}
    version = DocumentVersion.objects.get(revision=response.json()["revision"])
    assert version.origin["proposalId"] == proposal_id
    assert "sessionId" not in version.origin


def test_approve_with_an_edited_summary_only_is_an_owner_write(
    reviewed: Session, workshop: Document, api: APIClient
) -> None:
    """The approver's summary is the approver's: the version is not the agent's, so the
    session's revert or an incident's trace never takes it for the agent's write."""
    proposal_id = save(reviewed, "Node.js 24.")["proposalId"]
    response = approve(api, proposal_id, workshop.revision, {"summary": "Checked by Olivia."})
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["text"], body["summary"]) == ("Node.js 24.", "Checked by Olivia.")
    assert body["writer"] == {"kind": "owner"}
    version = DocumentVersion.objects.get(revision=body["revision"])
    assert (version.writer_kind, version.writer_session_id) == ("owner", "")
    assert version.origin["proposalId"] == proposal_id
    assert "sessionId" not in version.origin
    # The proposal's own text and the summary it leaves as it was: still the agent's.
    stored = current(workshop)
    second = save(reviewed, "Node.js 26.", call_id="c2")["proposalId"]
    unedited = approve(
        api, second, stored.revision, {"text": "Node.js 26.", "summary": stored.summary}
    )
    assert unedited.status_code == 200, unedited.json()
    assert unedited.json()["writer"] == {"kind": "agent", "sessionId": reviewed.id}


def test_approving_after_the_document_moved_goes_through_the_merge(
    reviewed: Session, api: APIClient, make_document: Any, notes: Any
) -> None:
    doc = make_document("plan", text="one\ntwo\nthree\nfour\nfive\n")
    reviewed_session = Session.objects.get(pk=reviewed.pk)
    binding = reviewed_session.bindings.get(resource=notes)
    binding.target_id = "plan"
    binding.save()
    proposal_id = save(reviewed_session, "one\ntwo\nthree\nfour\nFIVE\n")["proposalId"]
    moved = document_replace(
        resource=notes,
        doc_id="plan",
        expected_revision=doc.revision,
        text="ONE\ntwo\nthree\nfour\nfive\n",
        actor="t",
    )
    # Approving over the revision the agent read: the document moved, nothing is written.
    response = approve(api, proposal_id, doc.revision)
    assert response.status_code == 412
    details = response.json()["error"]["details"]
    assert details == {
        "currentRevision": moved.revision,
        "merged": "ONE\ntwo\nthree\nfour\nFIVE\n",
    }
    assert Proposal.objects.get(pk=proposal_id).state == "pending"
    assert current(doc).revision == moved.revision
    # The merged text over the current revision: both changes kept.
    response = approve(api, proposal_id, moved.revision, {"text": details["merged"]})
    assert response.status_code == 200
    assert current(doc).text == "ONE\ntwo\nthree\nfour\nFIVE\n"


def test_reject_needs_a_reason_and_is_final(
    reviewed: Session, workshop: Document, api: APIClient
) -> None:
    proposal_id = save(reviewed, "Poison.")["proposalId"]
    assert reject(api, proposal_id, {}).status_code == 400
    assert reject(api, proposal_id, {"reason": ""}).status_code == 400
    assert reject(api, proposal_id, {"reason": "x", "more": 1}).status_code == 400
    response = reject(api, proposal_id, {"reason": "Not true."})
    assert response.status_code == 200
    assert response.json()["state"] == "rejected"
    assert response.json()["reason"] == "Not true."
    assert approve(api, proposal_id, workshop.revision).status_code == 409
    assert current(workshop).revision == workshop.revision
    assert api.get(f"{PROPOSALS}{DEV}&state=rejected").json()["proposals"][0]["id"] == proposal_id
    assert api.get(f"{PROPOSALS}{DEV}").json()["proposals"] == []
    entry = AuditEntry.objects.get(action="proposal.reject")
    assert entry.detail == {"proposalId": proposal_id, "reason": "Not true."}


def test_deleting_a_document_rejects_its_pending_proposals_and_blanks_them_all(
    reviewed: Session, workshop: Document, api: APIClient, owner: Any
) -> None:
    pending = save(reviewed, "Secret plan.", call_id="c1")["proposalId"]
    decided = save(reviewed, "Old idea.", call_id="c2")["proposalId"]
    assert reject(api, decided, {"reason": "No."}).status_code == 200
    response = api.delete(f"{DOCS}/workshop{DEV}", HTTP_IF_MATCH=f'"{workshop.revision}"')
    assert response.status_code == 204
    # Nothing of the agent's text is left, and nothing is left to decide.
    body = api.get(f"{PROPOSALS}/{pending}{DEV}").json()
    assert (body["state"], body["reason"], body["text"], body["summary"]) == (
        "rejected",
        "document deleted",
        "",
        None,
    )
    assert body["decidedBy"].startswith("key:")
    assert body["currentRevision"] is None
    assert api.get(f"{PROPOSALS}{DEV}").json()["proposals"] == []
    rejected = api.get(f"{PROPOSALS}{DEV}&state=rejected").json()["proposals"]
    assert sorted((p["id"], p["reason"], p["text"]) for p in rejected) == sorted(
        [(pending, "document deleted", ""), (decided, "No.", "")]
    )
    assert approve(api, pending, workshop.revision).status_code == 409
    stored = Proposal.objects.order_by("text")
    assert [(p.text, p.summary) for p in stored] == [("", None), ("", None)]
    entry = AuditEntry.objects.filter(action="proposal.reject").latest("id")
    assert entry.detail == {"proposalId": pending, "reason": "document deleted"}
    assert AuditEntry.objects.filter(action="proposal.reject").count() == 2
    # The Review page: nothing pending, and the rejected list shows no text of the agent's.
    inbox = html_of(owner.get("/projects/acme/development/review/"))
    assert pending not in inbox
    assert "Secret plan." not in inbox
    closed = html_of(owner.get("/projects/acme/development/review/?state=rejected"))
    assert pending in closed
    assert "document deleted" in closed
    assert "Secret plan." not in closed
    assert "Old idea." not in closed
    detail = owner.get(f"/projects/acme/development/review/{pending}/")
    assert detail.status_code == 200
    assert "Secret plan." not in html_of(detail)
    badge = html_of(owner.get("/projects/acme/development/review/count/", HTTP_HX_REQUEST="true"))
    assert ">1<" not in badge


def test_expired_proposals_cannot_be_decided(
    reviewed: Session, workshop: Document, api: APIClient
) -> None:
    proposal_id = save(reviewed, "Late.")["proposalId"]
    Proposal.objects.filter(pk=proposal_id).update(expires_at=timezone.now() - timedelta(1))
    assert api.get(f"{PROPOSALS}{DEV}").json()["proposals"] == []
    listed = api.get(f"{PROPOSALS}{DEV}&state=expired").json()["proposals"]
    assert [(p["id"], p["state"]) for p in listed] == [(proposal_id, "expired")]
    response = approve(api, proposal_id, workshop.revision)
    assert response.status_code == 409
    assert response.json()["error"]["details"] == {"state": "expired"}
    assert current(workshop).revision == workshop.revision


def test_approval_needs_a_read_write_key_of_the_project(
    reviewed: Session, workshop: Document, client_for: Any, keys: Keys
) -> None:
    proposal_id = save(reviewed, "Mine.")["proposalId"]
    assert approve(client_for(keys.read_only), proposal_id, workshop.revision).status_code == 403
    assert approve(client_for(keys.other), proposal_id, workshop.revision).status_code == 403
    assert approve(client_for(None), proposal_id, workshop.revision).status_code == 401
    assert reject(client_for(keys.read_only), proposal_id, {"reason": "r"}).status_code == 403
    assert client_for(keys.read_only).get(f"{PROPOSALS}{DEV}").status_code == 200
    assert client_for(keys.other).get(f"{PROPOSALS}/{proposal_id}{DEV}").status_code == 403
    assert Proposal.objects.get(pk=proposal_id).state == "pending"


def test_the_agent_cannot_approve_its_own_proposal(reviewed: Session, workshop: Document) -> None:
    proposal_id = save(reviewed, "Trust me.")["proposalId"]
    recall = recall_create(session=reviewed, use=["notes"])
    assert [t["name"] for t in recall["tools"]] == ["memory_save"]
    with pytest.raises(InvalidRequest):
        tool_call(
            session=reviewed,
            recall_id=recall["recallId"],
            call_id="c",
            name="memory_approve",
            arguments={"proposalId": proposal_id},
        )
    # Saving again only proposes again.
    again = tool_call(
        session=reviewed,
        recall_id=recall["recallId"],
        call_id="c2",
        name="memory_save",
        arguments={"text": "Trust me."},
    )
    assert again["status"] == "proposed"
    assert current(workshop).text == "Exercises must run on Node.js 22."


def test_proposal_routes_answer_bad_input_in_the_envelope(api: APIClient) -> None:
    assert api.get(f"{PROPOSALS}{DEV}&state=nope").status_code == 400
    assert api.get(PROPOSALS).status_code == 400
    missing = approve(api, "prop_missing", "r")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    no_header = api.post(
        f"{PROPOSALS}/prop_missing/approve{DEV}", data="{}", content_type="application/json"
    )
    assert no_header.status_code == 428


# The Memory page.


def test_inbox_shows_proposals_and_the_badge_counts_them(
    reviewed: Session, workshop: Document, owner: Any, web: Any
) -> None:
    proposal_id = save(reviewed, "Node.js 24.")["proposalId"]
    html = html_of(owner.get("/projects/acme/development/review/"))
    assert proposal_id in html
    assert "Node.js 24." in html
    assert "support-bot" in html
    badge = html_of(owner.get("/projects/acme/development/review/count/", HTTP_HX_REQUEST="true"))
    assert 'id="review-count"' in badge
    assert ">1<" in badge
    assert web("support").get("/projects/acme/development/review/").status_code == 200
    assert web("viewer").get("/projects/acme/development/review/").status_code == 403
    assert web("outsider").get("/projects/acme/development/review/").status_code == 404


def test_page_approve_reject_and_the_merge_view(
    reviewed: Session, workshop: Document, owner: Any, web: Any
) -> None:
    first = save(reviewed, "Node.js 24.")["proposalId"]
    url = f"/projects/acme/development/review/{first}/"
    # Support may reject but never approve.
    denied = web("support").post(url + "approve/", {"revision": workshop.revision})
    assert denied.status_code == 403
    response = owner.post(url + "approve/", {"revision": workshop.revision})
    assert response.status_code == 302
    approved = current(workshop)
    assert approved.text == "Node.js 24."
    second = save(reviewed, "Node.js 26.")["proposalId"]
    document_replace(
        resource=workshop.resource,
        doc_id="workshop",
        expected_revision=approved.revision,
        text="Owner moved it.",
        actor="t",
    )
    # Approving over the revision the page showed: the document moved, the merge view.
    url = f"/projects/acme/development/review/{second}/"
    conflict = owner.post(url + "approve/", {"revision": approved.revision})
    assert conflict.status_code == 409
    html = conflict.content.decode()
    assert "changed since the agent read it" in html
    assert "Owner moved it." in html
    assert current(workshop).text == "Owner moved it."
    rejected = web("support").post(url + "reject/", {"reason": "Wrong version."})
    assert rejected.status_code == 302
    assert Proposal.objects.get(pk=second).reason == "Wrong version."
    assert web("support").post(url + "reject/", {"reason": ""}).status_code == 302


def test_page_edit_then_approve(reviewed: Session, workshop: Document, owner: Any) -> None:
    proposal_id = save(reviewed, "Node.js 24.")["proposalId"]
    url = f"/projects/acme/development/review/{proposal_id}/"
    assert "Node.js 24." in html_of(owner.get(url))
    response = owner.post(
        url + "approve/",
        {"revision": workshop.revision, "text": "Node.js 24, edited.", "summary": "S"},
    )
    assert response.status_code == 302
    stored = current(workshop)
    assert (stored.text, stored.summary, stored.writer_kind) == (
        "Node.js 24, edited.",
        "S",
        "owner",
    )


def test_page_switches_a_document_to_review(
    session: Session, workshop: Document, owner: Any, web: Any
) -> None:
    url = "/projects/acme/development/resources/notes/documents/workshop/"
    assert web("viewer").post(url + "agent-writes/", {"agentWrites": "review"}).status_code == 403
    assert owner.post(url + "agent-writes/", {"agentWrites": "review"}).status_code == 302
    assert current(workshop).agent_review is True
    assert "under review" in html_of(owner.get(url))
    assert save(session, "x")["status"] == "proposed"
    assert owner.post(url + "agent-writes/", {"agentWrites": "enabled"}).status_code == 302
    assert save(session, "x")["status"] == "saved"
    assert AuditEntry.objects.filter(action="document.review").count() == 2


# The CLI.


def memory(*args: str) -> str:
    out = StringIO()
    call_command("memory", "--project", "acme", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_cli_lists_approves_and_rejects(reviewed: Session, workshop: Document) -> None:
    first = save(reviewed, "Node.js 24.")["proposalId"]
    assert first in memory("proposals")
    listed = json.loads(memory("proposals", "--json"))
    assert [p["id"] for p in listed["proposals"]] == [first]
    memory("approve", first)
    assert current(workshop).text == "Node.js 24."
    version = DocumentVersion.objects.get(revision=current(workshop).revision)
    assert version.origin["actor"].startswith("cli:")
    second = save(reviewed, "Node.js 26.")["proposalId"]
    with pytest.raises(CommandError):
        memory("reject", second, "--reason", "")
    memory("reject", second, "--reason", "No.")
    assert Proposal.objects.get(pk=second).state == "rejected"
    with pytest.raises(CommandError):
        memory("approve", second)
    assert "No pending proposals" in memory("proposals")


def test_cli_approve_after_a_move_offers_the_merge(reviewed: Session, workshop: Document) -> None:
    proposal_id = save(reviewed, "Exercises must run on Node.js 22.\nAnd Deno.")["proposalId"]
    document_patch(
        resource=workshop.resource,
        doc_id="workshop",
        expected_revision=workshop.revision,
        title="Renamed",
        actor="t",
    )
    with pytest.raises(CommandError) as info:
        memory("approve", proposal_id)
    assert "--merged" in str(info.value)
    memory("approve", proposal_id, "--merged")
    stored = current(workshop)
    assert (stored.title, stored.text) == (
        "Renamed",
        "Exercises must run on Node.js 22.\nAnd Deno.",
    )


def test_cli_sets_review_on_a_document(project: Project, workshop: Document) -> None:
    memory("review", "notes", "workshop")
    assert current(workshop).agent_review is True
    memory("review", "notes", "workshop", "--off")
    assert current(workshop).agent_review is False
    shown = json.loads(memory("review", "notes", "workshop", "--inherit", "--json"))
    assert shown["agentWrites"] == "enabled"
    deploy_review(project)
    assert json.loads(memory("show", "notes", "workshop", "--json"))["agentWrites"] == "review"
    assert resource_get(
        project=project, environment="development", resource_id="notes"
    ).review_default
