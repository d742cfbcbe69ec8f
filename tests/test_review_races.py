"""Agent saves under review and approval against concurrent writers, with real threads on
PostgreSQL."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from memoryadmin.agents.models import Session
from memoryadmin.agents.services.runtime import recall_create, tool_call
from memoryadmin.core.errors import DomainError
from memoryadmin.memory.models import Document, DocumentVersion, Project, Proposal
from memoryadmin.memory.services import proposals
from memoryadmin.memory.services.deployments import deployment_create
from memoryadmin.memory.services.documents import (
    document_delete,
    document_replace,
    document_set_agent_writes,
)
from memoryadmin.memory.services.proposals import proposal_approve, proposal_reject
from tests.helpers import MANIFEST_MEMORY, run_threads

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def reviewed_recall(project: Project, session: Session) -> str:
    """A recall of notes (workshop) under review."""
    notes = {**MANIFEST_MEMORY[0]}
    notes["provider"] = {**notes["provider"], "agentWrites": "review"}
    deployment_create(
        project=project,
        agent="support-bot",
        memory=[notes, MANIFEST_MEMORY[1]],
        promote="development",
        actor="t",
    )
    return str(recall_create(session=session, use=["notes"])["recallId"])


def agent_saves(session: Session, recall_id: str, text: str) -> dict[str, Any]:
    return tool_call(
        session=session,
        recall_id=recall_id,
        call_id="c",
        name="memory_save",
        arguments={"text": text},
    )


def propose(project: Project, session: Session, text: str) -> str:
    result = agent_saves(session, reviewed_recall(project, session), text)
    assert result["status"] == "proposed"
    return str(result["proposalId"])


def approval(project: Project, proposal_id: str, revision: str) -> Any:
    return lambda: proposal_approve(
        project=project,
        environment="development",
        proposal_id=proposal_id,
        expected_revision=revision,
        actor="user:olivia",
    )


def outcome(work: Any) -> str:
    try:
        work()
    except DomainError as exc:
        return exc.code
    return "ok"


def test_approve_racing_an_owner_edit_lets_exactly_one_write(
    project: Project, session: Session, workshop: Document
) -> None:
    proposal_id = propose(project, session, "From the agent.")

    def work(index: int) -> str:
        if index == 0:
            return outcome(approval(project, proposal_id, workshop.revision))
        return outcome(
            lambda: document_replace(
                resource=workshop.resource,
                doc_id="workshop",
                expected_revision=workshop.revision,
                text="From the owner.",
                actor="user:olivia",
            )
        )

    results = run_threads(2, work)
    assert sorted(results) == ["ok", "precondition_failed"]
    stored = Document.objects.get(pk=workshop.pk)
    proposal = Proposal.objects.get(pk=proposal_id)
    if results[0] == "ok":
        assert (stored.text, proposal.state) == ("From the agent.", "approved")
    else:
        # The losing approval rolled back whole: the proposal is still pending.
        assert (stored.text, proposal.state) == ("From the owner.", "pending")
    assert DocumentVersion.objects.filter(document=workshop).count() == 2


def test_concurrent_decisions_on_one_proposal_decide_it_once(
    project: Project, session: Session, workshop: Document
) -> None:
    proposal_id = propose(project, session, "From the agent.")

    def work(index: int) -> str:
        if index % 2:
            return outcome(
                lambda: proposal_reject(
                    project=project,
                    environment="development",
                    proposal_id=proposal_id,
                    reason=f"no {index}",
                    actor="user:sam",
                )
            )
        return outcome(approval(project, proposal_id, workshop.revision))

    results = Counter(run_threads(8, work))
    assert results["ok"] == 1
    assert results["proposal_decided"] + results["precondition_failed"] == 7
    proposal = Proposal.objects.get(pk=proposal_id)
    written = DocumentVersion.objects.filter(document=workshop).count()
    assert written == (2 if proposal.state == "approved" else 1)


# An owner's write that commits while an agent's save under review is between reading the
# document and writing its proposal, and what the save then answers (the direct path's
# answers): the owner's write wins, and no proposal is left over it.
OWNER_FIRST = {
    "freeze": (
        lambda doc: document_set_agent_writes(
            resource=doc.resource, doc_id="workshop", enabled=False, actor="user:olivia"
        ),
        {"status": "rejected", "reason": "agent_writes_disabled"},
    ),
    "edit": (
        lambda doc: document_replace(
            resource=doc.resource,
            doc_id="workshop",
            expected_revision=doc.revision,
            text="From the owner.",
            actor="user:olivia",
        ),
        {"status": "conflict", "text": "From the owner."},
    ),
    "delete": (
        lambda doc: document_delete(
            resource=doc.resource,
            doc_id="workshop",
            expected_revision=doc.revision,
            actor="user:olivia",
        ),
        {"status": "rejected", "reason": "not_found"},
    ),
}


@pytest.mark.parametrize("owner_write", list(OWNER_FIRST))
def test_an_owner_write_that_commits_first_wins_over_a_save_under_review(
    project: Project, session: Session, workshop: Document, monkeypatch: Any, owner_write: str
) -> None:
    write, answer = OWNER_FIRST[owner_write]
    recall_id = reviewed_recall(project, session)
    read, written = threading.Event(), threading.Event()
    judge = proposals.review_catches

    def held_after_reading(**kwargs: Any) -> bool:
        # Called once the save has read the document, before it writes anything.
        read.set()
        assert written.wait(30)
        return judge(**kwargs)

    monkeypatch.setattr(proposals, "review_catches", held_after_reading)

    def work(index: int) -> Any:
        if index == 0:
            return agent_saves(session, recall_id, "From the agent.")
        assert read.wait(30)
        write(workshop)
        written.set()
        return "written"

    saved, _ = run_threads(2, work)
    assert {k: saved.get(k) for k in answer} == answer
    assert not Proposal.objects.exists()
    stored = Document.objects.get(pk=workshop.pk)
    assert stored.text != "From the agent."
    assert (stored.agent_writes, stored.deleted) == (
        owner_write != "freeze",
        owner_write == "delete",
    )


def test_a_delete_racing_an_approval_waits_for_it_and_never_deadlocks(
    project: Project, session: Session, workshop: Document, monkeypatch: Any
) -> None:
    proposal_id = propose(project, session, "From the agent.")
    claimed, go = threading.Event(), threading.Event()
    write = proposals.document_replace

    def held_after_claiming(**kwargs: Any) -> Document:
        # The approval holds its claim on the proposal; the delete starts meanwhile.
        claimed.set()
        assert go.wait(30)
        return write(**kwargs)

    monkeypatch.setattr(proposals, "document_replace", held_after_claiming)

    def work(index: int) -> str:
        if index == 0:
            return outcome(approval(project, proposal_id, workshop.revision))
        assert claimed.wait(30)
        # The approval goes on once the delete has had time to wait for it.
        threading.Timer(1.0, go.set).start()
        return outcome(
            lambda: document_delete(
                resource=workshop.resource,
                doc_id="workshop",
                expected_revision=workshop.revision,
                actor="user:sam",
            )
        )

    # The delete waited for the approval (the document then had another revision).
    assert run_threads(2, work) == ["ok", "precondition_failed"]
    stored = Document.objects.get(pk=workshop.pk)
    assert (stored.deleted, stored.text) == (False, "From the agent.")
    proposal = Proposal.objects.get(pk=proposal_id)
    assert (proposal.state, proposal.text) == ("approved", "From the agent.")
