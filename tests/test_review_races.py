"""Approval against concurrent writers, with real threads on PostgreSQL."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from memoryadmin.agents.models import Session
from memoryadmin.agents.services.runtime import recall_create, tool_call
from memoryadmin.core.errors import DomainError
from memoryadmin.memory.models import Document, DocumentVersion, Project, Proposal
from memoryadmin.memory.services.deployments import deployment_create
from memoryadmin.memory.services.documents import document_replace
from memoryadmin.memory.services.proposals import proposal_approve, proposal_reject
from tests.helpers import MANIFEST_MEMORY, run_threads

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def propose(project: Project, session: Session, text: str) -> str:
    notes = {**MANIFEST_MEMORY[0]}
    notes["provider"] = {**notes["provider"], "agentWrites": "review"}
    deployment_create(
        project=project,
        agent="support-bot",
        memory=[notes, MANIFEST_MEMORY[1]],
        promote="development",
        actor="t",
    )
    recall = recall_create(session=session, use=["notes"])
    result = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c",
        name="memory_save",
        arguments={"text": text},
    )
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
