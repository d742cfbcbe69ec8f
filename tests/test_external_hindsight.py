"""Hindsight 0.8 as an external provider, against a fake Hindsight server on loopback:
retains are asynchronous (a batch-retain server refuses synchronous ones), tracked at
`GET .../operations/{operation_id}` and reconciled by the background runner."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from rest_framework.test import APIClient

from memoryadmin.agents.models import ProviderOperation
from memoryadmin.agents.services.runtime import recall_create, tool_call
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.external.models import ExternalRecord
from memoryadmin.memory.models import AuditEntry, Project, Resource
from memoryadmin.runner.jobs import jobs_run_due
from tests.fake_providers import FakeHindsight
from tests.helpers import DEV, deploy_external, external_session

TOKEN = "hindsight-test"
RECORDS = "/api/managed-agents/projects/acme/memory/mem/records"
ALICE = DEV + "&namespace=alice"


@pytest.fixture(autouse=True)
def _quick(settings: Any) -> None:
    settings.MEMORYADMIN_OPERATION_BACKOFF_SECONDS = 0
    settings.MEMORYADMIN_OPERATION_MAX_ATTEMPTS = 3
    settings.MEMORYADMIN_JOB_BACKOFF_SECONDS = 0


def reconciled(operation_id: str) -> ProviderOperation:
    """One round of due background jobs, then the operation as the store has it."""
    jobs_run_due()
    return ProviderOperation.objects.get(pk=operation_id)


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


def test_create_retains_the_text_as_its_own_document_asynchronously(
    api: APIClient, mem: Resource, hindsight: FakeHindsight
) -> None:
    created = api.post(RECORDS + ALICE, {"text": "Alice moved to Porto."}, format="json")
    assert created.status_code == 202, created.json()
    body = created.json()
    assert body["status"] == "queued"
    retain = hindsight.seen("POST", "/v1/default/banks/team-alice/memories")[0].body
    assert retain["async"] is True
    assert retain["items"][0]["content"] == "Alice moved to Porto."
    assert retain["items"][0]["document_id"].startswith("memoryadmin-")
    assert body["providerOperation"] in hindsight.operations
    operation = ProviderOperation.objects.get(pk=body["operation"])
    assert (operation.kind, operation.state, operation.namespace) == (
        "accepted_write",
        "queued",
        "alice",
    )
    assert hindsight.units("team-alice") == []  # nothing is claimed before Hindsight has it

    assert reconciled(operation.id).state == "queued"  # the batch_retain parent is pending
    assert reconciled(operation.id).state == "succeeded"
    status = f"/v1/default/banks/team-alice/operations/{body['providerOperation']}"
    assert len(hindsight.seen("GET", status)) == 2
    assert [u["text"] for u in hindsight.units("team-alice")] == ["Alice moved to Porto."]


def test_a_batch_retain_server_is_written_to_and_reconciled(
    api: APIClient, mem: Resource, hindsight: FakeHindsight
) -> None:
    """HINDSIGHT_API_RETAIN_BATCH_ENABLED=true refuses every synchronous retain (400)."""
    hindsight.batch_retain = True
    created = api.post(RECORDS + ALICE, {"text": "Alice moved to Porto."}, format="json")
    assert created.status_code == 202, created.json()
    operation_id = created.json()["operation"]
    assert not AuditEntry.objects.filter(action="provider.failed").exists()
    assert reconciled(operation_id).state == "queued"
    done = reconciled(operation_id)
    assert (done.state, done.last_error) == ("succeeded", "")
    listed = api.get(RECORDS + ALICE).json()["records"]
    assert [r["text"] for r in listed] == ["Alice moved to Porto."]


def test_a_model_add_on_a_batch_retain_server_is_accepted(
    project: Project, mem: Resource, hindsight: FakeHindsight
) -> None:
    hindsight.batch_retain = True
    session = external_session(project, "alice")
    recall = recall_create(session=session, use=["mem"], input_text=None)
    added = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c1",
        name="memory_add",
        arguments={"text": "Alice starts at nine."},
    )
    assert added["status"] == "accepted", added
    operation = ProviderOperation.objects.get(pk=added["operation"])
    assert (operation.session_id, operation.tool, operation.call_id) == (
        session.id,
        "memory_add",
        "c1",
    )
    assert operation.provider_operation in hindsight.operations
    assert reconciled(operation.id).state == "queued"
    assert reconciled(operation.id).state == "succeeded"
    assert [u["text"] for u in hindsight.units("team-alice")] == ["Alice starts at nine."]
    description = next(t for t in recall["tools"] if t["name"] == "memory_add")["description"]
    assert "accepted" in description


def test_slow_extraction_is_never_uncertain(
    project: Project, mem: Resource, hindsight: FakeHindsight, settings: Any
) -> None:
    """A retain that waited for its facts to be extracted would outlive the call's deadline."""
    settings.MEMORYADMIN_PROVIDER_DEADLINE_SECONDS = 1
    hindsight.extraction_seconds = 3
    session = external_session(project, "alice")
    recall = recall_create(session=session, use=["mem"], input_text=None)
    started = time.monotonic()
    added = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c1",
        name="memory_add",
        arguments={"text": "Alice starts at nine."},
    )
    assert added["status"] == "accepted", added
    assert time.monotonic() - started < 1
    assert ProviderOperation.objects.get().kind == "accepted_write"


def test_a_failed_retain_operation_is_failed_with_hindsights_reason(
    api: APIClient, mem: Resource, hindsight: FakeHindsight
) -> None:
    hindsight.fail_operations = True
    operation_id = api.post(RECORDS + ALICE, {"text": "Lost."}, format="json").json()["operation"]
    assert reconciled(operation_id).state == "queued"
    failed = reconciled(operation_id)
    assert failed.state == "failed"
    assert failed.last_error == "Extraction failed: model unavailable"  # no traceback
    assert hindsight.units("team-alice") == []


def test_an_operation_hindsight_no_longer_knows_is_failed_never_a_success(
    api: APIClient, mem: Resource, hindsight: FakeHindsight
) -> None:
    body = api.post(RECORDS + ALICE, {"text": "Gone."}, format="json").json()
    # The bank was deleted, its operations with it (ON DELETE CASCADE).
    del hindsight.operations[body["providerOperation"]]
    failed = reconciled(body["operation"])
    assert failed.state == "failed"
    assert "no longer knows" in failed.last_error


def test_a_server_that_retains_synchronously_anyway_stores_at_once(
    api: APIClient, mem: Resource, hindsight: FakeHindsight
) -> None:
    """An answer without an operation (the retain was done during the request) is stored."""

    def synchronous(call: Any) -> tuple[int, Any]:
        items = call.body["items"]
        for item in items:
            hindsight.seed("team-alice", item["content"], item["document_id"])
        return 200, {"success": True, "bank_id": "team-alice", "items_count": 1, "async": False}

    hindsight.routes.insert(0, ("POST", re.compile(hindsight.BANK + "/memories"), synchronous))
    created = api.post(RECORDS + ALICE, {"text": "Alice moved to Porto."}, format="json")
    assert created.status_code == 201, created.json()
    assert created.json() == {"status": "stored", "records": []}
    assert not ProviderOperation.objects.exists()
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
    assert added["status"] == "accepted"
    assert reconciled(added["operation"]).state == "queued"
    assert reconciled(added["operation"]).state == "succeeded"
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


@pytest.mark.parametrize("bank", [".", ".."])
def test_a_fixed_bank_that_is_a_step_in_the_path_is_refused_at_deployment(
    project: Project, hindsight: FakeHindsight, bank: str
) -> None:
    with pytest.raises(InvalidRequest, match=r"bankId cannot be '\.' or '\.\.'"):
        deploy_external(project, {"kind": "hindsight", "baseUrl": hindsight.origin, "bankId": bank})
    assert not Resource.objects.filter(resource_id="mem").exists()
    assert hindsight.calls == []
