"""Mem0 Platform as an external provider, against a fake api.mem0.ai on https://127.0.0.1:
https only, the API key as a managed secret, direct imports (`infer: false`) stored at once
with their ids, adds the platform queues finishing after several polls of their event (or
failing), and the v1 memory routes for the rest."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from memoryadmin.agents.models import ProviderOperation
from memoryadmin.agents.services.runtime import recall_create, tool_call
from memoryadmin.external.ids import external_memory_id, provider_id
from memoryadmin.memory.models import AuditEntry, Project, Resource
from memoryadmin.memory.services.deployments import deployment_create
from memoryadmin.runner.jobs import jobs_run_due
from tests.fake_providers import FakeMem0Platform
from tests.helpers import DEV, deploy_external, external_session

API_KEY = "mem0-platform-key"
RECORDS = "/api/managed-agents/projects/acme/memory/mem/records"
ALICE = DEV + "&namespace=alice"


def declaration(server: FakeMem0Platform) -> dict[str, Any]:
    return {
        "kind": "mem0-platform",
        "baseUrl": server.origin,
        "apiKey": {"secret": "MEM0_API_KEY"},
        "orgId": "org-1",
        "projectId": "proj-1",
        "scope": {"user_id": "{namespace}", "app_id": "support"},
    }


@pytest.fixture
def mem(project: Project, mem0_platform: FakeMem0Platform) -> Resource:
    return deploy_external(
        project,
        declaration(mem0_platform),
        secrets_by_origin={mem0_platform.origin: {"MEM0_API_KEY": API_KEY}},
    )


@pytest.fixture(autouse=True)
def _quick(settings: Any) -> None:
    settings.MEMORYADMIN_OPERATION_BACKOFF_SECONDS = 0
    settings.MEMORYADMIN_OPERATION_MAX_ATTEMPTS = 3
    settings.MEMORYADMIN_JOB_BACKOFF_SECONDS = 0


def reconciled(operation_id: str) -> ProviderOperation:
    """One round of due background jobs, then the operation as the store has it."""
    jobs_run_due()
    return ProviderOperation.objects.get(pk=operation_id)


def test_plain_http_is_refused_even_on_loopback(project: Project) -> None:
    with pytest.raises(Exception, match="must use https://"):
        deployment_create(
            project=project,
            agent="archivist",
            memory=[
                {
                    "id": "mem",
                    "description": "E.",
                    "provider": {
                        "kind": "mem0-platform",
                        "baseUrl": "http://127.0.0.1:9",
                        "apiKey": {"secret": "K"},
                    },
                }
            ],
            actor="t",
        )


def test_the_api_key_must_be_a_secret_reference(project: Project) -> None:
    with pytest.raises(Exception, match="apiKey is required"):
        deployment_create(
            project=project,
            agent="archivist",
            memory=[
                {
                    "id": "mem",
                    "description": "E.",
                    "provider": {"kind": "mem0-platform", "apiKey": "m0-literal"},
                }
            ],
            actor="t",
        )


def test_a_direct_import_is_stored_at_once_with_its_ids(
    api: APIClient, mem: Resource, mem0_platform: FakeMem0Platform
) -> None:
    """`infer: false` answers SUCCEEDED with the memories it stored: no event to wait for."""
    created = api.post(RECORDS + ALICE, {"text": "Alice lives in Austin."}, format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["status"] == "stored"
    [external] = mem0_platform.memories
    record_id = external_memory_id(provider_id(mem), external)
    assert [(r["id"], r["text"]) for r in body["records"]] == [
        (record_id, "Alice lives in Austin.")
    ]
    assert body["records"][0]["metadata"]["providerExternalId"] == external
    add = mem0_platform.seen("POST", "/v3/memories/add/")[0]
    assert add.body["infer"] is False
    assert (add.body["user_id"], add.body["app_id"]) == ("alice", "support")
    assert not ProviderOperation.objects.exists()
    assert not mem0_platform.seen("GET", r"/v1/event/.*")
    audit = AuditEntry.objects.get(action="record.create")
    assert (audit.detail["status"], audit.detail["ids"]) == ("stored", [record_id])

    one = api.get(f"{RECORDS}/{record_id}{ALICE}").json()
    assert (one["id"], one["text"]) == (record_id, "Alice lives in Austin.")
    assert api.delete(f"{RECORDS}/{record_id}{ALICE}").status_code == 200
    assert mem0_platform.memories == {}


def test_a_model_add_is_stored_with_its_ids(
    project: Project, mem: Resource, mem0_platform: FakeMem0Platform
) -> None:
    session = external_session(project, "alice")
    recall = recall_create(session=session, use=["mem"], input_text=None)
    result = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c1",
        name="memory_add",
        arguments={"text": "Alice adopted a second cat."},
    )
    [external] = mem0_platform.memories
    assert result == {"status": "stored", "ids": [external_memory_id(provider_id(mem), external)]}
    assert not ProviderOperation.objects.exists()
    forgotten = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c2",
        name="memory_forget",
        arguments={"id": result["ids"][0]},
    )
    assert forgotten["status"] == "deleted"
    assert mem0_platform.memories == {}


def test_a_direct_import_the_platform_failed_is_a_provider_failure(
    api: APIClient, mem: Resource, mem0_platform: FakeMem0Platform
) -> None:
    mem0_platform.fail_events = True
    created = api.post(RECORDS + ALICE, {"text": "Lost."}, format="json")
    assert created.status_code == 502, created.json()
    assert created.json()["error"]["code"] == "provider_failed"
    assert not ProviderOperation.objects.exists()
    assert mem0_platform.memories == {}
    failed = AuditEntry.objects.get(action="provider.failed")
    assert failed.detail["operation"] == "add"
    assert "failed the add" in failed.detail["description"]


def test_a_queued_add_is_queued_until_its_event_succeeds(
    api: APIClient, mem: Resource, mem0_platform: FakeMem0Platform
) -> None:
    mem0_platform.queued_imports = True
    created = api.post(RECORDS + ALICE, {"text": "Alice lives in Austin."}, format="json")
    assert created.status_code == 202, created.json()
    body = created.json()
    assert body["status"] == "queued"
    event_id = body["providerOperation"]
    operation = ProviderOperation.objects.get(pk=body["operation"])
    assert (operation.provider_operation, operation.state) == (event_id, "queued")
    assert operation.principal.startswith("key:")
    assert operation.session is None
    assert mem0_platform.memories == {}  # nothing is claimed before the platform has it
    add = mem0_platform.seen("POST", "/v3/memories/add/")[0]
    assert add.body["user_id"] == "alice"
    assert add.body["app_id"] == "support"
    assert add.query == {"org_id": "org-1", "project_id": "proj-1"}
    assert add.headers["Authorization"] == f"Token {API_KEY}"

    assert reconciled(operation.id).state == "queued"  # the event is RUNNING
    assert mem0_platform.memories == {}
    assert reconciled(operation.id).state == "succeeded"
    assert len(mem0_platform.seen("GET", f"/v1/event/{event_id}/")) == 2
    external = next(iter(mem0_platform.memories))
    record_id = external_memory_id(provider_id(mem), external)

    one = api.get(f"{RECORDS}/{record_id}{ALICE}").json()
    assert one["text"] == "Alice lives in Austin."
    assert one["metadata"]["providerExternalId"] == external


def test_a_failed_event_is_failed_never_a_success(
    mem: Resource, mem0_platform: FakeMem0Platform, api: APIClient
) -> None:
    mem0_platform.fail_events = True
    mem0_platform.queued_imports = True
    operation_id = api.post(RECORDS + ALICE, {"text": "Lost."}, format="json").json()["operation"]
    assert reconciled(operation_id).state == "queued"
    failed = reconciled(operation_id)
    assert failed.state == "failed"
    assert failed.last_error == "Extraction failed: model unavailable"
    assert mem0_platform.memories == {}


def test_an_event_that_never_finishes_becomes_a_visible_dead_letter(
    mem: Resource, mem0_platform: FakeMem0Platform, api: APIClient
) -> None:
    mem0_platform.polls_to_finish = 100
    mem0_platform.queued_imports = True
    operation_id = api.post(RECORDS + ALICE, {"text": "Slow."}, format="json").json()["operation"]
    states = [reconciled(operation_id).state for _ in range(4)]
    assert states == ["queued", "queued", "dead", "dead"]
    listed = api.get(
        "/api/managed-agents/projects/acme/memory/operations?environment=development&state=dead"
    ).json()["operations"]
    assert [o["id"] for o in listed] == [operation_id]
    assert AuditEntry.objects.filter(action="operation.dead_letter").count() == 1
    assert mem0_platform.memories == {}


def test_records_read_update_history_and_delete(
    api: APIClient, mem: Resource, mem0_platform: FakeMem0Platform
) -> None:
    external = mem0_platform.seed("Alice likes jazz.", user_id="alice", app_id="support")
    mem0_platform.seed("Someone else.", user_id="bob", app_id="support")
    listed = api.get(RECORDS + ALICE).json()
    assert [r["metadata"]["providerExternalId"] for r in listed["records"]] == [external]
    listing = mem0_platform.seen("POST", "/v3/memories/")[0]
    assert listing.body == {"filters": {"AND": [{"app_id": "support"}, {"user_id": "alice"}]}}
    assert listing.query["page"] == "1"
    record_id = listed["records"][0]["id"]

    found = api.get(RECORDS + ALICE + "&q=jazz").json()["records"]
    assert [r["id"] for r in found] == [record_id]

    updated = api.patch(
        f"{RECORDS}/{record_id}{ALICE}", {"text": "Alice loves jazz."}, format="json"
    )
    assert updated.status_code == 200, updated.json()
    assert mem0_platform.memories[external]["memory"] == "Alice loves jazz."
    history = api.get(f"{RECORDS}/{record_id}/history{ALICE}").json()["history"]
    assert [h["action"] for h in history] == ["create", "update"]

    assert api.delete(f"{RECORDS}/{record_id}{ALICE}").status_code == 200
    assert external not in mem0_platform.memories
    assert api.get(f"{RECORDS}/{record_id}{ALICE}").status_code == 404


def test_list_pages_follow_the_platform_pages(
    api: APIClient, mem: Resource, mem0_platform: FakeMem0Platform
) -> None:
    for i in range(55):
        mem0_platform.seed(f"Fact {i}.", user_id="alice", app_id="support")
    first = api.get(RECORDS + ALICE).json()
    second = api.get(RECORDS + ALICE + "&cursor=" + first["nextCursor"]).json()
    assert (len(first["records"]), len(second["records"])) == (50, 5)
    assert second["nextCursor"] is None
    assert [c.query["page"] for c in mem0_platform.seen("POST", "/v3/memories/")] == ["1", "2"]


def test_tools_add_is_accepted_when_queued_and_recall_searches(
    project: Project, mem: Resource, mem0_platform: FakeMem0Platform
) -> None:
    mem0_platform.queued_imports = True
    mem0_platform.seed("Alice's cat is called Miso.", user_id="alice", app_id="support")
    session = external_session(project, "alice")
    recall = recall_create(session=session, use=["mem"], input_text="What is the cat called?")
    assert recall["memory"]["mem"]["text"] == "Alice's cat is called Miso."
    result = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c1",
        name="memory_add",
        arguments={"text": "Alice adopted a second cat."},
    )
    assert result["status"] == "accepted"
    operation = ProviderOperation.objects.get(pk=result["operation"])
    assert operation.provider_operation in mem0_platform.events
    assert (operation.session_id, operation.tool, operation.call_id) == (
        session.id,
        "memory_add",
        "c1",
    )
    assert reconciled(operation.id).state == "queued"
    assert reconciled(operation.id).state == "succeeded"
    assert "Alice adopted a second cat." in [m["memory"] for m in mem0_platform.memories.values()]
    description = next(t for t in recall["tools"] if t["name"] == "memory_add")["description"]
    assert "accepted" in description


def test_the_api_key_never_reaches_responses(
    api: APIClient, mem: Resource, mem0_platform: FakeMem0Platform
) -> None:
    bodies = [
        api.post(RECORDS + ALICE, {"text": "x"}, format="json").content,
        api.get("/api/managed-agents/projects/acme/deployments").content,
    ]
    mem0_platform.api_key = "rotated-elsewhere"
    failed = api.get(RECORDS + ALICE)
    assert failed.status_code == 502
    bodies.append(failed.content)
    assert all(API_KEY.encode() not in body for body in bodies)
