"""The Python client's review, provenance, revert and as-of operations over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from memoryadmin.memory.models import Document, Project
from memoryadmin.memory.services.deployments import deployment_create
from memoryadmin.memory.services.keys import api_key_create
from memoryadmin_client import ApiError, Client
from tests.helpers import MANIFEST_MEMORY

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def client(live_server: Any, project: Project) -> Iterator[Client]:
    with Client(live_server.url, api_key_create(project_id=project.id)[1], project="acme") as c:
        yield c


def test_client_reviews_reads_provenance_reverts_and_restores(
    client: Client, project: Project, workshop: Document
) -> None:
    notes = {**MANIFEST_MEMORY[0], "provider": {"kind": "document", "agentWrites": "review"}}
    deployment_create(
        project=project, agent="support-bot", memory=[notes], promote="development", actor="t"
    )
    started = client.create_session(
        agent="support-bot",
        memory={"notes": {"scope": "document", "id": "workshop", "access": "read-write"}},
        idempotency_key="trust",
    )
    session_id = started["session"]["id"]
    recall = client.recall(session_id, use=["notes"])
    proposed = client.tool_call(
        session_id,
        recall_id=recall["recallId"],
        call_id="c1",
        name="memory_save",
        arguments={"text": "Node.js 24."},
    )
    assert proposed["status"] == "proposed"
    page = client.list_proposals()
    assert [p["id"] for p in page["proposals"]] == [proposed["proposalId"]]
    with pytest.raises(ApiError) as stale:
        client.approve_proposal(proposed["proposalId"], revision="nope")
    assert stale.value.status == 412
    document = client.approve_proposal(proposed["proposalId"], revision=workshop.revision)
    assert document["text"] == "Node.js 24."
    reverted = client.revert_session(session_id, dry_run=True)
    assert [d["action"] for d in reverted["documents"]] == ["restore"]
    readers = client.version_readers("notes", "workshop", workshop.revision)
    assert [r["recallId"] for r in readers["readers"]] == [recall["recallId"]]
    recalls = client.list_recalls(session_id)
    assert recalls["recalls"][0]["id"] == recall["recallId"]
    plan = client.restore_as_of("notes", as_of=workshop.updated_at.isoformat(), dry_run=True)
    assert [d["action"] for d in plan["documents"]] == ["restore"]
    assert client.get_document("notes", "workshop")["text"] == "Node.js 24."
    listed = client.list_documents("notes", as_of=workshop.updated_at.isoformat())
    assert listed["documents"][0]["revision"] == workshop.revision
