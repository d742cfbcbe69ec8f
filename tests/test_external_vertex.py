"""Vertex AI Memory Bank as an external provider, against a fake aiplatform on
https://127.0.0.1: service-account credentials exchanged for tokens, memories written through
long-running operations that finish after several polls (or fail), retrieval by scope."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.db import IntegrityError, connections
from django.utils import timezone
from rest_framework.test import APIClient

from memoryadmin.agents.errors import RecallFailed
from memoryadmin.agents.models import ProviderOperation, Recall, RecordDeleteClaim
from memoryadmin.agents.services import records as records_services
from memoryadmin.agents.services.records import record_delete
from memoryadmin.agents.services.runtime import recall_create, tool_call
from memoryadmin.core.cancellation import Cancelled, caller_connection
from memoryadmin.core.concurrency import in_flight, requests_waiting
from memoryadmin.external.ids import external_memory_id, provider_id
from memoryadmin.external.models import ExternalRecord
from memoryadmin.external.vertex import under_engine
from memoryadmin.memory.models import AuditEntry, Project, Resource
from memoryadmin.memory.services.deployments import deployment_create
from memoryadmin.memory.services.keys import api_key_create
from memoryadmin.runner.jobs import jobs_run_due
from tests.fake_providers import FakeVertexMemoryBank
from tests.helpers import DEV, deploy_external, external_provider, external_session, run_threads

RECORDS = "/api/managed-agents/projects/acme/memory/mem/records"
ALICE = DEV + "&namespace=alice"
SCOPE = {"user_id": "alice", "app": "support"}


def declaration(server: FakeVertexMemoryBank, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "vertex-memory-bank",
        "baseUrl": server.origin,
        "project": "acme-prod",
        "location": "us-central1",
        "reasoningEngine": "4242",
        "credentials": {"secret": "VERTEX_SA", "type": "service-account"},
        "scope": {"user_id": "{namespace}", "app": "support"},
        **extra,
    }


def _deploy(project: Project, server: FakeVertexMemoryBank, **extra: Any) -> Resource:
    return deploy_external(
        project,
        declaration(server, **extra),
        secrets_by_origin={server.origin: {"VERTEX_SA": server.account_json()}},
    )


@pytest.fixture
def mem(project: Project, vertex: FakeVertexMemoryBank) -> Resource:
    return _deploy(project, vertex)


@pytest.fixture(autouse=True)
def _quick(settings: Any) -> None:
    settings.MEMORYADMIN_OPERATION_BACKOFF_SECONDS = 0
    settings.MEMORYADMIN_OPERATION_MAX_ATTEMPTS = 3
    settings.MEMORYADMIN_JOB_BACKOFF_SECONDS = 0


def reconciled(operation_id: str) -> ProviderOperation:
    """One round of due background jobs, then the operation as the store has it."""
    jobs_run_due()
    return ProviderOperation.objects.get(pk=operation_id)


def test_required_settings_and_https(project: Project) -> None:
    base = {"kind": "vertex-memory-bank", "baseUrl": "https://127.0.0.1:9"}
    cases = [
        ({**base, "project": "p", "location": "l"}, "reasoningEngine is required"),
        (
            {**base, "project": "p", "location": "l", "reasoningEngine": "1"},
            "credentials is required",
        ),
        (
            {
                **base,
                "baseUrl": "http://127.0.0.1:9",
                "project": "p",
                "location": "l",
                "reasoningEngine": "1",
                "credentials": {"secret": "S", "type": "bearer-token"},
            },
            "must use https://",
        ),
    ]
    for provider, message in cases:
        with pytest.raises(Exception, match=message):
            deployment_create(
                project=project,
                agent="archivist",
                memory=[{"id": "mem", "description": "E.", "provider": provider}],
                actor="t",
            )


def test_create_is_queued_until_its_operation_is_done(
    api: APIClient, mem: Resource, vertex: FakeVertexMemoryBank
) -> None:
    created = api.post(RECORDS + ALICE, {"text": "Alice is vegetarian."}, format="json")
    assert created.status_code == 202, created.json()
    name = created.json()["providerOperation"]
    operation_id = created.json()["operation"]
    assert name.startswith(FakeVertexMemoryBank.PARENT + "/memories/")
    assert vertex.memories == {}
    create = vertex.seen("POST", r"/v1beta1/.*/reasoningEngines/4242/memories")[0]
    assert create.body == {"fact": "Alice is vegetarian.", "scope": SCOPE}
    assert create.headers["Authorization"].startswith("Bearer ya29.")

    assert reconciled(operation_id).state == "queued"
    assert reconciled(operation_id).state == "succeeded"
    memory_id = next(iter(vertex.memories))
    assert external_memory_id(provider_id(mem), memory_id) in {
        r["id"] for r in api.get(RECORDS + ALICE).json()["records"]
    }
    # One token for all of it: cached until it nears its expiry.
    assert len(vertex.seen("POST", "/token")) == 1

    records = api.get(RECORDS + ALICE).json()["records"]
    assert [r["text"] for r in records] == ["Alice is vegetarian."]
    assert records[0]["metadata"]["scope"] == SCOPE


def test_update_and_delete_are_queued_then_applied_with_history(
    api: APIClient, mem: Resource, vertex: FakeVertexMemoryBank
) -> None:
    memory_id = vertex.seed("Alice likes tea.", SCOPE)
    record_id = api.get(RECORDS + ALICE).json()["records"][0]["id"]

    patched = api.patch(
        f"{RECORDS}/{record_id}{ALICE}", {"text": "Alice likes coffee."}, format="json"
    )
    assert patched.status_code == 202, patched.json()
    assert vertex.memories[memory_id]["fact"] == "Alice likes tea."  # not yet
    assert vertex.seen("PATCH", r".*/memories/" + memory_id)[0].query == {"updateMask": "fact"}
    assert [reconciled(patched.json()["operation"]).state for _ in range(2)] == [
        "queued",
        "succeeded",
    ]
    assert api.get(f"{RECORDS}/{record_id}{ALICE}").json()["text"] == "Alice likes coffee."
    history = api.get(f"{RECORDS}/{record_id}/history{ALICE}").json()["history"]
    assert [(h["action"], h["text"]) for h in history] == [
        ("create", "Alice likes tea."),
        ("update", "Alice likes coffee."),
    ]

    deleted = api.delete(f"{RECORDS}/{record_id}{ALICE}")
    assert deleted.status_code == 202
    assert memory_id in vertex.memories
    assert [reconciled(deleted.json()["operation"]).state for _ in range(2)] == [
        "queued",
        "succeeded",
    ]
    assert memory_id not in vertex.memories
    assert api.get(f"{RECORDS}/{record_id}{ALICE}").status_code == 404
    # Its delete done, the record is forgotten as a delete answered at once forgets it:
    # deleting it again is a 404 that asks the provider nothing, never a second delete.
    calls = len(vertex.calls)
    again = api.delete(f"{RECORDS}/{record_id}{ALICE}")
    assert (again.status_code, again.json()["error"]["code"]) == (404, "not_found")
    assert len(vertex.calls) == calls
    assert not ExternalRecord.objects.filter(record_id=record_id).exists()
    assert {e.action for e in AuditEntry.objects.filter(action__startswith="record.")} == {
        "record.update",
        "record.delete",
    }


def test_a_delete_while_one_is_open_is_answered_with_the_open_one(
    api: APIClient, mem: Resource, vertex: FakeVertexMemoryBank
) -> None:
    """A record whose delete the provider has accepted and not finished: deleting it again
    sends nothing and answers 202 with the open operation; it is audited as asked."""
    memory_id = vertex.seed("Alice likes tea.", SCOPE)
    record_id = api.get(RECORDS + ALICE).json()["records"][0]["id"]
    first = api.delete(f"{RECORDS}/{record_id}{ALICE}")
    assert first.status_code == 202, first.json()
    calls = len(vertex.seen("DELETE", r".*/memories/" + memory_id))
    assert calls == 1

    again = api.delete(f"{RECORDS}/{record_id}{ALICE}")
    assert again.status_code == 202, again.json()
    assert again.json() == first.json()
    assert len(vertex.seen("DELETE", r".*/memories/" + memory_id)) == 1
    assert ProviderOperation.objects.filter(action="delete", record_id=record_id).count() == 1
    audited = AuditEntry.objects.filter(action="record.delete").order_by("id")
    assert [(a.detail["id"], a.detail["status"]) for a in audited] == [
        (record_id, "queued"),
        (record_id, "queued"),
    ]

    # Once the provider finished it, the record is forgotten: a 404, nothing sent.
    assert [reconciled(first.json()["operation"]).state for _ in range(2)] == [
        "queued",
        "succeeded",
    ]
    assert memory_id not in vertex.memories
    assert api.delete(f"{RECORDS}/{record_id}{ALICE}").status_code == 404
    assert len(vertex.seen("DELETE", r".*/memories/" + memory_id)) == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_first_deletes_at_once_send_one_and_both_name_its_operation(
    live_server: Any, mem: Resource, vertex: FakeVertexMemoryBank, api: APIClient
) -> None:
    """Two deletes of one record at the same moment, neither finding an open one: the
    provider hears of one, both callers are answered 202 with its operation."""
    memory_id = vertex.seed("Alice likes tea.", SCOPE)
    record_id = api.get(RECORDS + ALICE).json()["records"][0]["id"]
    key = api_key_create(project_id="acme")[1]
    url = f"{live_server.url}{RECORDS}/{record_id}{ALICE}"
    sent = r".*/memories/" + memory_id
    held = vertex.stall(sent, method="DELETE")

    def release() -> None:
        # The first delete is held at the provider until the second has had the time to
        # reach it too (it never does once the first holds the record's delete).
        assert held.arrived.wait(30)
        deadline = time.monotonic() + 2
        while len(vertex.seen("DELETE", sent)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        held.release.set()

    releaser = threading.Thread(target=release)
    releaser.start()

    def delete(_: int) -> tuple[int, Any]:
        with httpx.Client(timeout=60) as client:
            response = client.delete(url, headers={"x-api-key": key})
        return response.status_code, response.json()

    answers = run_threads(2, delete)
    releaser.join(30)
    assert len(vertex.seen("DELETE", sent)) == 1
    assert [status for status, _ in answers] == [202, 202], answers
    operations = ProviderOperation.objects.filter(action="delete", record_id=record_id)
    assert [o.id for o in operations] == [answers[0][1]["operation"]]
    assert answers[0][1] == answers[1][1]
    assert answers[0][1]["status"] == "queued"
    audited = AuditEntry.objects.filter(action="record.delete")
    assert sorted(a.detail["status"] for a in audited) == ["queued", "queued"]


@pytest.mark.django_db(transaction=True)
def test_a_delete_sent_to_the_provider_holds_no_transaction_over_the_call(
    live_server: Any, mem: Resource, vertex: FakeVertexMemoryBank, api: APIClient
) -> None:
    """While the provider holds a record's delete, the record's claim is a committed row
    and no transaction is open: other writes go through at once (on SQLite a transaction
    held over the call would hold every project's writes for up to the call's deadline)."""
    memory_id = vertex.seed("Alice likes tea.", SCOPE)
    record_id = api.get(RECORDS + ALICE).json()["records"][0]["id"]
    key = api_key_create(project_id="acme")[1]
    held = vertex.stall(r".*/memories/" + memory_id, method="DELETE")
    answers: list[int] = []

    def delete() -> None:
        with httpx.Client(timeout=60) as client:
            url = f"{live_server.url}{RECORDS}/{record_id}{ALICE}"
            answers.append(client.delete(url, headers={"x-api-key": key}).status_code)

    deleting = threading.Thread(target=delete)
    deleting.start()
    try:
        assert held.arrived.wait(30)
        claim = RecordDeleteClaim.objects.get()
        assert (claim.record_id, claim.namespace) == (record_id, "alice")
        # A write elsewhere while the call is held: not kept waiting for it.
        assert Project.objects.filter(pk="acme").update(name="Acme renamed") == 1
        assert not answers
    finally:
        held.release.set()
        deleting.join(30)
    assert answers == [202]
    assert not RecordDeleteClaim.objects.exists()


def test_a_claim_older_than_the_calls_deadline_is_taken_over(
    api: APIClient, mem: Resource, vertex: FakeVertexMemoryBank
) -> None:
    """A claim left by a process that died mid-call does not keep the record undeletable."""
    memory_id = vertex.seed("Alice likes tea.", SCOPE)
    record_id = api.get(RECORDS + ALICE).json()["records"][0]["id"]
    RecordDeleteClaim.objects.create(
        resource=mem,
        namespace="alice",
        record_id=record_id,
        claimed_at=timezone.now() - timedelta(minutes=5),
    )
    response = api.delete(f"{RECORDS}/{record_id}{ALICE}")
    assert response.status_code == 202, response.json()
    assert len(vertex.seen("DELETE", r".*/memories/" + memory_id)) == 1
    assert not RecordDeleteClaim.objects.exists()


def _forget(session: Any, recall_id: str, call_id: str, record_id: str) -> dict[str, Any]:
    return tool_call(
        session=session,
        recall_id=recall_id,
        call_id=call_id,
        name="memory_forget",
        arguments={"id": record_id},
    )


def test_a_sessions_forget_and_an_owners_delete_answer_for_each_other_while_open(
    api: APIClient, project: Project, mem: Resource, vertex: FakeVertexMemoryBank
) -> None:
    """The model's forget follows the rule every delete of a record follows: while an
    owner's delete the provider accepted is open, the forget sends nothing and is answered
    `accepted` with that operation (the record is being forgotten); while the forget's is
    open, an owner's delete is answered with it, and so is a second forget."""
    memory_id = vertex.seed("Alice likes tea.", SCOPE)
    other_id = vertex.seed("Alice likes jazz.", SCOPE)
    session = external_session(project, "alice")
    recall = recall_create(session=session, use=["mem"], input_text=None)["recallId"]
    ids = {
        r["metadata"]["providerExternalId"]: r["id"]
        for r in api.get(RECORDS + ALICE).json()["records"]
    }

    owners = api.delete(f"{RECORDS}/{ids[memory_id]}{ALICE}")
    assert owners.status_code == 202, owners.json()
    forgotten = _forget(session, recall, "c1", ids[memory_id])
    assert forgotten == {"status": "accepted", "operation": owners.json()["operation"]}
    assert len(vertex.seen("DELETE", r".*/memories/" + memory_id)) == 1
    assert ProviderOperation.objects.filter(record_id=ids[memory_id]).count() == 1

    first = _forget(session, recall, "c2", ids[other_id])
    assert first["status"] == "accepted", first
    operation = ProviderOperation.objects.get(pk=first["operation"])
    assert (operation.session_id, operation.action, operation.record_id) == (
        session.id,
        "delete",
        ids[other_id],
    )
    assert _forget(session, recall, "c3", ids[other_id]) == first
    again = api.delete(f"{RECORDS}/{ids[other_id]}{ALICE}")
    assert again.status_code == 202, again.json()
    assert again.json()["operation"] == first["operation"]
    assert len(vertex.seen("DELETE", r".*/memories/" + other_id)) == 1
    assert ProviderOperation.objects.filter(record_id=ids[other_id]).count() == 1
    assert not RecordDeleteClaim.objects.exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_sessions_forget_and_an_owners_delete_at_once_send_one(
    live_server: Any, project: Project, mem: Resource, vertex: FakeVertexMemoryBank, api: APIClient
) -> None:
    """An owner's delete and the model's forget of one record at the same moment: the
    provider hears of one delete, and both are answered with its operation."""
    memory_id = vertex.seed("Alice likes tea.", SCOPE)
    session = external_session(project, "alice")
    recall = recall_create(session=session, use=["mem"], input_text=None)["recallId"]
    record_id = api.get(RECORDS + ALICE).json()["records"][0]["id"]
    key = api_key_create(project_id="acme")[1]
    sent = r".*/memories/" + memory_id
    held = vertex.stall(sent, method="DELETE")

    def release() -> None:
        # The first delete is held at the provider until the second has had the time to
        # reach it too (it never does once the first holds the record's claim).
        assert held.arrived.wait(30)
        deadline = time.monotonic() + 2
        while len(vertex.seen("DELETE", sent)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        held.release.set()

    releaser = threading.Thread(target=release)
    releaser.start()

    def delete(index: int) -> Any:
        if index == 1:
            return _forget(session, recall, "c1", record_id)
        with httpx.Client(timeout=60) as client:
            response = client.delete(
                f"{live_server.url}{RECORDS}/{record_id}{ALICE}", headers={"x-api-key": key}
            )
        return response.status_code, response.json()

    owners, forgotten = run_threads(2, delete)
    releaser.join(30)
    assert len(vertex.seen("DELETE", sent)) == 1
    [operation] = ProviderOperation.objects.filter(action="delete", record_id=record_id)
    assert owners[0] == 202, owners
    assert (owners[1]["status"], owners[1]["operation"]) == ("queued", operation.id)
    assert forgotten == {"status": "accepted", "operation": operation.id}
    assert not RecordDeleteClaim.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_delete_waiting_for_anothers_claim_counts_as_a_provider_call_of_its_project(
    mem: Resource,
    vertex: FakeVertexMemoryBank,
    api: APIClient,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A delete waiting for another caller's claim of its record holds a request thread:
    it counts against its project's bounds on provider calls as the call it then makes
    does, so the project's next provider request past them is refused (429)."""
    memory_id = vertex.seed("Alice likes tea.", SCOPE)
    record_id = api.get(RECORDS + ALICE).json()["records"][0]["id"]
    settings.MEMORYADMIN_PROVIDER_REQUESTS_PER_PROJECT = 1
    claim = RecordDeleteClaim.objects.create(
        resource=mem, namespace="alice", record_id=record_id, claimed_at=timezone.now()
    )
    refused = threading.Event()
    create = RecordDeleteClaim.objects.create

    def claim_create(**fields: Any) -> RecordDeleteClaim:
        try:
            return create(**fields)
        except IntegrityError:
            refused.set()
            raise

    monkeypatch.setattr(RecordDeleteClaim.objects, "create", claim_create)
    answers: list[Any] = []

    def delete() -> None:
        try:
            answers.append(
                record_delete(resource=mem, namespace="alice", record_id=record_id, actor="t")
            )
        finally:
            connections.close_all()

    waiting = threading.Thread(target=delete)
    waiting.start()
    try:
        assert refused.wait(30)
        assert (in_flight("acme"), requests_waiting("acme")) == (1, 1)
        busy = api.get(RECORDS + ALICE)
        assert busy.status_code == 429, busy.json()
        assert busy.json()["error"]["code"] == "provider_failed"
        assert int(busy["Retry-After"]) >= 1
    finally:
        claim.delete()
        waiting.join(30)
    assert [answer["status"] for answer in answers] == ["queued"]
    assert ProviderOperation.objects.get().id == answers[0]["operation"]
    assert len(vertex.seen("DELETE", r".*/memories/" + memory_id)) == 1
    assert (in_flight("acme"), requests_waiting("acme")) == (0, 0)
    assert not RecordDeleteClaim.objects.exists()


def test_a_claim_refused_for_another_cause_is_raised_not_waited_on_for_ever(
    mem: Resource, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim's insert refused by something other than another claim (its resource gone)
    ends the wait once any claim would have been taken over, instead of looping."""
    settings.MEMORYADMIN_PROVIDER_DEADLINE_SECONDS = 0.2
    monkeypatch.setattr(records_services, "TTL_MARGIN_SECONDS", 0)

    def refused(**_: Any) -> None:
        raise IntegrityError("FOREIGN KEY constraint failed")

    waits: list[float] = []
    pause = time.sleep

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) > 500:
            raise AssertionError("still waiting after 500 polls")
        pause(0.01)

    monkeypatch.setattr(RecordDeleteClaim.objects, "create", refused)
    monkeypatch.setattr(records_services.time, "sleep", sleep)
    with pytest.raises(IntegrityError):
        record_delete(resource=mem, namespace="alice", record_id="rec_1", actor="t")
    assert 1 <= len(waits) < 500


def test_a_delete_cancelled_in_flight_keeps_its_operation_and_the_next_is_sent(
    api: APIClient, mem: Resource, vertex: FakeVertexMemoryBank
) -> None:
    """A delete whose caller goes away while the provider has it: 409 `cancelled` naming
    the open operation that keeps it, committed with the record's claim gone; it is no
    open delete of the provider's, so the next delete is sent."""
    memory_id = vertex.seed("Alice likes tea.", SCOPE)
    record_id = api.get(RECORDS + ALICE).json()["records"][0]["id"]
    sent = r".*/memories/" + memory_id
    held = vertex.stall(sent, method="DELETE")
    with caller_connection(held.arrived.is_set), pytest.raises(Cancelled) as cancelled:
        record_delete(resource=mem, namespace="alice", record_id=record_id, actor="t")
    held.release.set()
    operation = ProviderOperation.objects.get()
    assert cancelled.value.details == {"operation": operation.id}
    assert (operation.kind, operation.action, operation.record_id) == (
        "cancelled_write",
        "delete",
        record_id,
    )
    assert not RecordDeleteClaim.objects.exists()
    again = api.delete(f"{RECORDS}/{record_id}{ALICE}")
    assert again.status_code == 202, again.json()
    assert len(vertex.seen("DELETE", sent)) == 2


def test_a_failed_delete_is_no_longer_open_and_is_sent_again(
    api: APIClient, mem: Resource, vertex: FakeVertexMemoryBank
) -> None:
    """Only an open delete answers for the next: one the provider failed is sent again."""
    memory_id = vertex.seed("Alice likes tea.", SCOPE)
    record_id = api.get(RECORDS + ALICE).json()["records"][0]["id"]
    vertex.fail_operations = True
    first = api.delete(f"{RECORDS}/{record_id}{ALICE}").json()["operation"]
    assert [reconciled(first).state for _ in range(2)] == ["queued", "failed"]
    vertex.fail_operations = False
    again = api.delete(f"{RECORDS}/{record_id}{ALICE}")
    assert again.status_code == 202, again.json()
    assert again.json()["operation"] != first
    assert len(vertex.seen("DELETE", r".*/memories/" + memory_id)) == 2


def test_a_failed_operation_is_failed_never_a_success(
    api: APIClient, mem: Resource, vertex: FakeVertexMemoryBank
) -> None:
    vertex.fail_operations = True
    operation_id = api.post(RECORDS + ALICE, {"text": "Lost."}, format="json").json()["operation"]
    assert reconciled(operation_id).state == "queued"
    failed = reconciled(operation_id)
    assert (failed.state, failed.last_error) == ("failed", "Memory Bank is not configured.")
    assert vertex.memories == {}


def test_generate_extracts_through_an_engine_operation(
    project: Project, vertex: FakeVertexMemoryBank, api: APIClient
) -> None:
    _deploy(project, vertex, add="generate")
    created = api.post(RECORDS + ALICE, {"text": "I moved to Lyon."}, format="json").json()
    assert created["providerOperation"].startswith(FakeVertexMemoryBank.PARENT + "/operations/")
    generate = vertex.seen("POST", r".*/memories:generate")[0].body
    assert generate["directContentsSource"]["events"][0]["content"]["parts"] == [
        {"text": "I moved to Lyon."}
    ]
    reconciled(created["operation"])
    assert reconciled(created["operation"]).state == "succeeded"
    assert [m["fact"] for m in vertex.memories.values()] == ["I moved to Lyon."]


def test_other_scopes_and_pages(
    api: APIClient, mem: Resource, vertex: FakeVertexMemoryBank
) -> None:
    for i in range(53):
        vertex.seed(f"Fact {i}.", SCOPE)
    other = vertex.seed("Bob's fact.", {"user_id": "bob", "app": "support"})
    first = api.get(RECORDS + ALICE).json()
    second = api.get(RECORDS + ALICE + "&cursor=" + first["nextCursor"]).json()
    assert (len(first["records"]), len(second["records"]), second["nextCursor"]) == (50, 3, None)
    bob = api.get(RECORDS + DEV + "&namespace=bob").json()["records"]
    assert [r["metadata"]["providerExternalId"] for r in bob] == [other]
    assert api.get(f"{RECORDS}/{bob[0]['id']}{ALICE}").status_code == 404


# A memory's id is the last segment of its resource name: a name without one that can be
# mapped makes the whole answer invalid, as an unusable id does for every kind.
ODD_NAMES = {
    "not a memory name": "projects/acme-prod/locations/us-central1/reasoningEngines/4242",
    "an id outside the pattern": FakeVertexMemoryBank.PARENT + "/memories/not.an.id",
    "an empty id": FakeVertexMemoryBank.PARENT + "/memories/",
    "a number": 12345,
    "null": None,
    "a memory of another engine": "projects/acme-prod/locations/us-central1/reasoningEngines/"
    "4243/memories/123",
    "a memory of another location": "projects/acme-prod/locations/europe-west4/"
    "reasoningEngines/4242/memories/123",
    "a revision's name": FakeVertexMemoryBank.PARENT + "/memories/123/revisions/1",
}


@pytest.mark.parametrize("odd", ODD_NAMES.values(), ids=ODD_NAMES.keys())
def test_a_memory_name_that_cannot_be_mapped_makes_the_answer_invalid(
    api: APIClient, project: Project, mem: Resource, vertex: FakeVertexMemoryBank, odd: object
) -> None:
    vertex.seed("Alice likes tea.", SCOPE)
    seeded = vertex.seed("Alice likes jazz.", SCOPE)
    vertex.memories[seeded]["name"] = odd

    listed = api.get(RECORDS + ALICE)
    assert listed.status_code == 502, listed.json()
    assert listed.json()["error"] == {
        "code": "provider_failed",
        "message": "The memory provider of 'mem' failed; trying again will not help until "
        "its owners fix it (the audit log has the details).",
        "details": {"resource": "mem", "retryable": False},
    }
    entry = AuditEntry.objects.get(action="provider.failed")
    assert (entry.detail["operation"], entry.detail["reason"]) == ("list", "invalid_response")
    assert "a record id that is not" in entry.detail["description"]

    session = external_session(project, "alice")
    with pytest.raises(RecallFailed) as failed:
        recall_create(session=session, use=["mem"], input_text="What does Alice like?")
    assert failed.value.details == {
        "resource": "mem",
        "reason": "provider_failed",
        "retryable": False,
    }
    assert AuditEntry.objects.filter(action="provider.failed").count() == 2
    assert not ExternalRecord.objects.exists()
    assert not Recall.objects.exists()


def test_a_memory_named_under_the_projects_number_is_the_engines(
    api: APIClient, mem: Resource, vertex: FakeVertexMemoryBank
) -> None:
    """Google names a project by its number in answers where it was asked by its id: the
    project's segment may be either, the location and the engine must be the declared."""
    vertex.seed("Alice likes tea.", SCOPE)
    seeded = vertex.seed("Alice likes jazz.", SCOPE)
    by_number = FakeVertexMemoryBank.PARENT.replace("acme-prod", "123456789012")
    vertex.memories[seeded]["name"] = f"{by_number}/memories/{seeded}"
    listed = api.get(RECORDS + ALICE)
    assert listed.status_code == 200, listed.json()
    records = listed.json()["records"]
    assert sorted(r["text"] for r in records) == ["Alice likes jazz.", "Alice likes tea."]
    [jazz] = [r for r in records if r["text"] == "Alice likes jazz."]
    assert jazz["metadata"]["providerExternalId"] == seeded
    assert under_engine(f"{by_number}/operations/7", FakeVertexMemoryBank.PARENT) == (
        "operations/7"
    )
    for elsewhere in (
        "projects/123456789012/locations/europe-west4/reasoningEngines/4242/operations/7",
        "projects/123456789012/locations/us-central1/reasoningEngines/4243/operations/7",
        "projects//locations/us-central1/reasoningEngines/4242/operations/7",
        "locations/us-central1/reasoningEngines/4242/operations/7",
    ):
        assert under_engine(elsewhere, FakeVertexMemoryBank.PARENT) is None, elsewhere


# A retrieved memory is an object; an item whose `memory` is anything else makes the
# answer invalid, as an item that is not an object does for every kind.
NOT_MEMORIES = {"a string": "Alice likes jazz.", "null": None, "missing": ...}


@pytest.mark.parametrize("odd", NOT_MEMORIES.values(), ids=NOT_MEMORIES.keys())
def test_a_retrieved_item_whose_memory_is_not_an_object_makes_the_answer_invalid(
    api: APIClient, project: Project, mem: Resource, vertex: FakeVertexMemoryBank, odd: object
) -> None:
    vertex.seed("Alice likes tea.", SCOPE)
    item = {"distance": 0.5} if odd is ... else {"memory": odd, "distance": 0.5}
    vertex.change(
        "POST",
        r".*/memories:retrieve",
        lambda answer: {**answer, "retrievedMemories": [*answer["retrievedMemories"], item]},
    )

    listed = api.get(RECORDS + ALICE)
    assert listed.status_code == 502, listed.json()
    assert listed.json()["error"]["code"] == "provider_failed"
    assert listed.json()["error"]["details"] == {"resource": "mem", "retryable": False}
    entry = AuditEntry.objects.get(action="provider.failed")
    assert (entry.detail["operation"], entry.detail["reason"]) == ("list", "invalid_response")
    assert "is not an object" in entry.detail["description"]

    session = external_session(project, "alice")
    with pytest.raises(RecallFailed):
        recall_create(session=session, use=["mem"], input_text="What does Alice like?")
    assert AuditEntry.objects.filter(action="provider.failed").count() == 2
    assert not ExternalRecord.objects.exists()
    assert not Recall.objects.exists()


@pytest.mark.parametrize("odd", ["an earlier fact", {"fact": "x"}, 3])
def test_revisions_that_are_not_a_list_make_the_history_invalid(
    api: APIClient, mem: Resource, vertex: FakeVertexMemoryBank, odd: object
) -> None:
    vertex.seed("Alice likes tea.", SCOPE)
    [record] = api.get(RECORDS + ALICE).json()["records"]
    vertex.change("GET", r".*/memories/[^/]+/revisions", lambda _: {"memoryRevisions": odd})

    history = api.get(f"{RECORDS}/{record['id']}/history{ALICE}")
    assert history.status_code == 502, history.json()
    assert history.json()["error"]["code"] == "provider_failed"
    entry = AuditEntry.objects.get(action="provider.failed")
    assert (entry.detail["operation"], entry.detail["reason"]) == ("revisions", "invalid_response")
    assert ExternalRecord.objects.count() == 1


def test_a_memory_without_revisions_has_an_empty_history(
    api: APIClient, mem: Resource, vertex: FakeVertexMemoryBank
) -> None:
    # Google's JSON leaves an empty list out.
    vertex.seed("Alice likes tea.", SCOPE)
    [record] = api.get(RECORDS + ALICE).json()["records"]
    vertex.change("GET", r".*/memories/[^/]+/revisions", lambda _: {})
    history = api.get(f"{RECORDS}/{record['id']}/history{ALICE}")
    assert history.status_code == 200, history.json()
    assert history.json() == {"history": []}


def test_bearer_tokens_are_sent_as_they_are(
    project: Project, vertex: FakeVertexMemoryBank, api: APIClient
) -> None:
    vertex.tokens.add("static-token")
    deploy_external(
        project,
        declaration(vertex, credentials={"secret": "VERTEX_TOKEN", "type": "bearer-token"}),
        secrets_by_origin={vertex.origin: {"VERTEX_TOKEN": "static-token"}},
    )
    assert api.get(RECORDS + ALICE).status_code == 200
    assert vertex.calls[-1].headers["Authorization"] == "Bearer static-token"
    assert not vertex.seen("POST", "/token")


def test_recall_retrieves_by_similarity_and_add_is_accepted(
    project: Project, mem: Resource, vertex: FakeVertexMemoryBank
) -> None:
    vertex.seed("Alice's manager is Priya.", SCOPE)
    vertex.seed("Alice's desk is by the window.", SCOPE)
    session = external_session(project, "alice")
    recall = recall_create(session=session, use=["mem"], input_text="Who is Alice's manager?")
    assert recall["memory"]["mem"]["text"].splitlines()[0] == "Alice's manager is Priya."
    retrieve = vertex.seen("POST", r".*/memories:retrieve")[-1].body
    assert retrieve["similaritySearchParams"]["searchQuery"] == "Who is Alice's manager?"
    added = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c1",
        name="memory_add",
        arguments={"text": "Alice prefers mornings."},
    )
    assert added["status"] == "accepted"
    operation = ProviderOperation.objects.get(pk=added["operation"])
    assert operation.provider_operation in vertex.operations
    assert operation.session_id == session.id


def test_the_service_account_key_never_reaches_responses_or_the_audit_log(
    api: APIClient, mem: Resource, vertex: FakeVertexMemoryBank
) -> None:
    private = vertex.account["private_key"].splitlines()[1]
    # The token endpoint no longer knows this account: the grant is refused.
    vertex.account["client_email"] = "someone-else@acme-prod.iam.gserviceaccount.com"
    failed = api.get(RECORDS + ALICE)
    assert failed.status_code == 502
    assert private not in failed.content.decode()
    assert "ya29" not in failed.content.decode()
    entry = AuditEntry.objects.get(action="provider.failed")
    assert entry.detail["operation"] == "token"
    assert entry.detail["status"] == 400
    for entry in AuditEntry.objects.all():
        assert private not in str(entry.detail)


@pytest.mark.parametrize("issued", ["ya29.caf\u00e9", "ya29.a\r\nX-Injected: 1", 42, ""])
def test_a_token_endpoints_unusable_token_fails_the_call_and_is_not_kept(
    api: APIClient, mem: Resource, vertex: FakeVertexMemoryBank, issued: Any
) -> None:
    """A token that cannot be a header value (not printable ASCII, or not a string) is the
    token endpoint's invalid answer: a provider failure (502), never sent, never cached."""
    vertex.seed("Alice's manager is Priya.", SCOPE)
    vertex.issue = issued
    failed = api.get(RECORDS + ALICE)
    assert failed.status_code == 502, failed.content
    assert failed.json()["error"]["code"] == "provider_failed"
    entry = AuditEntry.objects.get(action="provider.failed")
    assert (entry.detail["operation"], entry.detail["reason"]) == ("token", "invalid_response")
    assert [call.path for call in vertex.calls] == ["/token"]
    vertex.issue = None
    listed = api.get(RECORDS + ALICE)
    assert listed.status_code == 200, listed.content
    assert len(vertex.seen("POST", "/token")) == 2


def test_a_cancel_during_the_token_exchange_is_a_cancellation_not_a_provider_failure(
    project: Project, mem: Resource, vertex: FakeVertexMemoryBank
) -> None:
    """The token exchange is one of the operation's requests: cancelled by its caller, the
    call ends cancelled, as for any other request of it, never a provider failure (502,
    audited as the provider's fault)."""
    from memoryadmin.agents.services.runtime import call_cancel
    from memoryadmin.external import vertex as vertex_kind

    session = external_session(project, "alice")
    recall = recall_create(session=session, use=["mem"], input_text=None)
    vertex_kind._tokens.clear()  # the next call exchanges the key for a token again
    stall = vertex.stall("/token")

    def cancel_when_sent() -> None:
        assert stall.arrived.wait(10)
        call_cancel(session=session, call_id="c-search")

    canceller = threading.Thread(target=cancel_when_sent)
    canceller.start()
    started = time.monotonic()
    result = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c-search",
        name="memory_search",
        arguments={"query": "manager"},
    )
    elapsed = time.monotonic() - started
    canceller.join()
    stall.release.set()
    assert result == {"status": "cancelled"}
    assert elapsed < 5  # not the 10 s deadline
    assert len(vertex.seen("POST", "/token")) == 2  # the recall's, then this one: not retried
    assert not vertex.seen("POST", r".*/memories:retrieve")[1:]
    assert not AuditEntry.objects.filter(action="provider.failed").exists()

    # Opening a store, as an owner's call does: the same.
    cancelled = threading.Event()
    vertex_kind._tokens.clear()
    held = vertex.stall("/token")
    timer = threading.Timer(0.2, cancelled.set)
    timer.start()
    with pytest.raises(Cancelled):
        external_provider("vertex-memory-bank").open(mem, "alice", cancelled=cancelled)
    timer.join()
    held.release.set()
    assert not AuditEntry.objects.filter(action="provider.failed").exists()
