"""Hindsight 0.8 as an external provider, against a fake Hindsight server on loopback."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from memoryadmin.agents.services.runtime import recall_create, tool_call
from memoryadmin.external.models import ExternalRecord
from memoryadmin.memory.models import Project, Resource
from tests.fake_providers import FakeHindsight
from tests.helpers import DEV, deploy_external, external_session

TOKEN = "hindsight-test"
RECORDS = "/api/managed-agents/projects/acme/memory/mem/records"
ALICE = DEV + "&namespace=alice"


@pytest.fixture
def mem(project: Project, hindsight: FakeHindsight) -> Resource:
    return deploy_external(
        project,
        {
            "kind": "hindsight",
            "baseUrl": hindsight.origin,
            "bankId": "team-{namespace}",
            "headers": {"Authorization": {"secret": "HINDSIGHT_TOKEN", "scheme": "Bearer"}},
        },
        secrets_by_origin={hindsight.origin: {"HINDSIGHT_TOKEN": TOKEN}},
    )


def test_memory_units_are_listed_read_and_forgotten_with_their_document(
    api: APIClient, mem: Resource, hindsight: FakeHindsight
) -> None:
    kept = hindsight.seed("team-alice", "Alice leads the data team.", document_id="onboarding")
    together = hindsight.seed("team-alice", "Alice likes chess. She plays on Sundays.")
    hindsight.seed("team-bob", "Bob is new.")

    listed = api.get(RECORDS + ALICE)
    assert listed.status_code == 200, listed.json()
    records = listed.json()["records"]
    assert sorted(r["metadata"]["providerExternalId"] for r in records) == sorted(kept + together)
    by_external = {r["metadata"]["providerExternalId"]: r for r in records}

    one = api.get(f"{RECORDS}/{by_external[kept[0]]['id']}{ALICE}").json()
    assert one["text"] == "Alice leads the data team."
    assert one["metadata"]["documentId"] == "onboarding"

    found = api.get(RECORDS + ALICE + "&q=chess").json()["records"]
    assert [r["metadata"]["providerExternalId"] for r in found] == [together[0]]

    # Facts have no history in Hindsight (observations do).
    history = api.get(f"{RECORDS}/{by_external[kept[0]]['id']}/history{ALICE}")
    assert history.json() == {"history": []}

    deleted = api.delete(f"{RECORDS}/{by_external[together[0]]['id']}{ALICE}")
    assert deleted.status_code == 200, deleted.json()
    units = {u["id"] for u in hindsight.units("team-alice")}
    assert units == set(kept)  # the sibling fact of the same document went with it
    assert hindsight.seen("DELETE", r"/v1/default/banks/team-alice/documents/doc-.*")
    for call in hindsight.calls:
        assert call.headers["Authorization"] == f"Bearer {TOKEN}"


def test_update_is_not_supported_and_changes_nothing(
    api: APIClient, mem: Resource, hindsight: FakeHindsight
) -> None:
    unit = hindsight.seed("team-alice", "Alice leads the data team.")[0]
    record = api.get(RECORDS + ALICE).json()["records"][0]
    response = api.patch(f"{RECORDS}/{record['id']}{ALICE}", {"text": "Changed."}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "not_supported"
    assert hindsight.bank("team-alice")["units"][unit]["text"] == "Alice leads the data team."
    assert not [c for c in hindsight.calls if c.method not in {"GET"}]


def test_create_retains_the_text_as_its_own_document(
    api: APIClient, mem: Resource, hindsight: FakeHindsight
) -> None:
    created = api.post(RECORDS + ALICE, {"text": "Alice moved to Porto."}, format="json")
    assert created.status_code == 201, created.json()
    assert created.json() == {"status": "stored", "records": []}
    retain = hindsight.seen("POST", "/v1/default/banks/team-alice/memories")[0].body
    assert retain["async"] is False
    assert retain["items"][0]["content"] == "Alice moved to Porto."
    assert retain["items"][0]["document_id"].startswith("memoryadmin-")
    assert [u["text"] for u in hindsight.units("team-alice")] == ["Alice moved to Porto."]


def test_list_pages_follow_offsets(api: APIClient, mem: Resource, hindsight: FakeHindsight) -> None:
    hindsight.seed("team-alice", " ".join(f"Fact number {i}." for i in range(60)))
    first = api.get(RECORDS + ALICE).json()
    assert len(first["records"]) == 50
    second = api.get(RECORDS + ALICE + "&cursor=" + first["nextCursor"]).json()
    assert len(second["records"]) == 10
    assert second["nextCursor"] is None
    assert {r["id"] for r in first["records"]}.isdisjoint(r["id"] for r in second["records"])
    assert ExternalRecord.objects.filter(namespace="alice").count() == 60
    tampered = api.get(RECORDS + DEV + "&namespace=bob&cursor=" + first["nextCursor"])
    assert tampered.status_code == 400


def test_recall_and_tools_in_a_session(
    project: Project, mem: Resource, hindsight: FakeHindsight, settings: Any
) -> None:
    hindsight.seed("team-alice", "Alice's office is in Porto.")
    session = external_session(project, "alice")
    recall = recall_create(session=session, use=["mem"], input_text="Where is Alice's office?")
    assert recall["memory"]["mem"]["text"] == "Alice's office is in Porto."
    assert recall["memory"]["mem"]["sources"][0]["id"].startswith("xm_")
    added = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c1",
        name="memory_add",
        arguments={"text": "Alice starts at nine."},
    )
    assert added == {"status": "stored", "ids": []}
    found = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c2",
        name="memory_search",
        arguments={"query": "nine", "limit": 1},
    )
    assert [r["text"] for r in found["results"]] == ["Alice starts at nine."]
    forgotten = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c3",
        name="memory_forget",
        arguments={"id": found["results"][0]["id"]},
    )
    assert forgotten["status"] == "deleted"
    assert [u["text"] for u in hindsight.units("team-alice")] == ["Alice's office is in Porto."]


def test_a_failed_recall_is_audited_by_the_requests_thread(
    project: Project, mem: Resource, hindsight: FakeHindsight
) -> None:
    from memoryadmin.agents.errors import RecallFailed
    from memoryadmin.memory.models import AuditEntry

    session = external_session(project, "alice")
    hindsight.fail_next = [400]
    with pytest.raises(RecallFailed):
        recall_create(session=session, use=["mem"], input_text="anything")
    entry = AuditEntry.objects.get(action="provider.failed")
    assert entry.detail["operation"] == "recall"
    assert entry.detail["status"] == 400
