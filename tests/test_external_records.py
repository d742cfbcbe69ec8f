"""Records of external providers as owners and sessions reach them, against the fake servers
of tests/fake_providers.py: namespaces that share one provider partition, owner calls
cancelled when their caller goes away (API, Memory page, CLI), and what the durable
operation store records of a write (what it was, the deployment, its deadline)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from memoryadmin.agents.errors import RecallFailed
from memoryadmin.agents.models import ProviderOperation, Recall
from memoryadmin.agents.services.runtime import recall_create, tool_call
from memoryadmin.external.ids import records_map
from memoryadmin.external.models import ExternalRecord
from memoryadmin.memory.models import ActiveDeployment, AuditEntry, Project, Resource
from memoryadmin.runner.jobs import jobs_run_due
from tests.fake_providers import (
    FakeHindsight,
    FakeMem0Oss,
    FakeMem0Platform,
    FakeServer,
    FakeVertexMemoryBank,
    Raw,
)
from tests.helpers import (
    DEV,
    ROOT,
    Keys,
    People,
    clean_env,
    deploy_external,
    external_session,
    gunicorn,
    html_of,
    suite_database_url,
    wait_until,
)

RECORDS = "/api/managed-agents/projects/acme/memory/mem/records"
ALICE = DEV + "&namespace=alice"
MEM0_KEY = "mem0-test-key"
HINDSIGHT_TOKEN = "hindsight-test"


def mem0_declaration(server: FakeMem0Oss, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "mem0-oss",
        "baseUrl": server.origin,
        "scope": {"user_id": "{namespace}", "agent_id": "archivist"},
        "headers": {"X-API-Key": {"secret": "MEM0_KEY"}},
        **extra,
    }


# Namespaces sharing one partition (spec 004: get, update, history and delete resolve the
# provider identifier of a record in every namespace that shows it).


def test_namespaces_sharing_a_partition_resolve_its_records_alike(
    api: APIClient, project: Project, mem0_oss: FakeMem0Oss
) -> None:
    """A fixed scope (which declarations allow) puts every namespace in one Mem0 user: a
    record seen in a second namespace is read, updated, shown with its history and deleted
    there as well, under the same id."""
    deploy_external(
        project,
        mem0_declaration(mem0_oss, scope={"user_id": "team", "agent_id": "archivist"}),
        secrets_by_origin={mem0_oss.origin: {"MEM0_KEY": MEM0_KEY}},
    )
    made = api.post(RECORDS + ALICE, {"text": "The team meets on Mondays."}, format="json")
    assert made.status_code == 201, made.json()
    record_id = made.json()["records"][0]["id"]
    [external] = mem0_oss.memories
    bob = DEV + "&namespace=bob"
    assert [r["id"] for r in api.get(RECORDS + bob).json()["records"]] == [record_id]

    one = api.get(f"{RECORDS}/{record_id}{bob}")
    assert one.status_code == 200, one.json()
    assert one.json()["text"] == "The team meets on Mondays."
    updated = api.patch(
        f"{RECORDS}/{record_id}{bob}", {"text": "The team meets on Tuesdays."}, format="json"
    )
    assert updated.status_code == 200, updated.json()
    assert mem0_oss.memories[external]["memory"] == "The team meets on Tuesdays."
    history = api.get(f"{RECORDS}/{record_id}/history{bob}")
    assert history.status_code == 200, history.json()
    assert [h["action"] for h in history.json()["history"]] == ["create", "update"]
    # The namespace that saw it first still resolves it.
    assert api.get(f"{RECORDS}/{record_id}{ALICE}").json()["text"] == "The team meets on Tuesdays."
    assert sorted(
        ExternalRecord.objects.filter(record_id=record_id).values_list("namespace", flat=True)
    ) == ["alice", "bob"]

    deleted = api.delete(f"{RECORDS}/{record_id}{bob}")
    assert deleted.status_code == 200, deleted.json()
    assert mem0_oss.memories == {}
    # Gone at the provider, so gone from every namespace that saw it.
    assert not ExternalRecord.objects.filter(record_id=record_id).exists()
    assert api.get(f"{RECORDS}/{record_id}{ALICE}").status_code == 404


@pytest.mark.parametrize("resource_id", ["proposals", "incidents", "operations"])
def test_a_resource_named_as_a_project_wide_list_reaches_its_records(
    api: APIClient, project: Project, mem0_oss: FakeMem0Oss, resource_id: str
) -> None:
    """A resource id may be any word, including the names of the project's memory-wide
    lists (proposals, incidents, operations): its records are its own, not a proposal,
    incident or operation called "records"."""
    deploy_external(
        project,
        mem0_declaration(mem0_oss),
        resource_id=resource_id,
        secrets_by_origin={mem0_oss.origin: {"MEM0_KEY": MEM0_KEY}},
    )
    records = f"/api/managed-agents/projects/acme/memory/{resource_id}/records"
    made = api.post(records + ALICE, {"text": "The team meets on Mondays."}, format="json")
    assert made.status_code == 201, made.json()
    record_id = made.json()["records"][0]["id"]
    listed = api.get(records + ALICE)
    assert listed.status_code == 200, listed.json()
    assert [r["id"] for r in listed.json()["records"]] == [record_id]
    one = api.get(f"{records}/{record_id}{ALICE}")
    assert one.status_code == 200, one.json()
    assert one.json()["text"] == "The team meets on Mondays."
    assert len(mem0_oss.memories) == 1


def test_a_fixed_bank_shares_its_records_with_every_namespace(
    api: APIClient, project: Project, hindsight: FakeHindsight
) -> None:
    """With a fixed bankId every namespace reaches one bank: a fact listed in one namespace
    and recalled in another session's namespace is read and forgotten there."""
    deploy_external(
        project,
        {
            "kind": "hindsight",
            "baseUrl": hindsight.origin,
            "bankId": "shared",
            "headers": {"Authorization": {"secret": "HINDSIGHT_TOKEN", "scheme": "Bearer"}},
        },
        secrets_by_origin={hindsight.origin: {"HINDSIGHT_TOKEN": HINDSIGHT_TOKEN}},
    )
    [unit] = hindsight.seed("shared", "The office closes at six.")
    [listed] = api.get(RECORDS + ALICE).json()["records"]
    session = external_session(project, "bob")
    recall = recall_create(session=session, use=["mem"], input_text="When does the office close?")
    [source] = recall["memory"]["mem"]["sources"]
    assert source["id"] == listed["id"]
    one = api.get(f"{RECORDS}/{listed['id']}{DEV}&namespace=bob")
    assert one.status_code == 200, one.json()
    assert one.json()["metadata"]["providerExternalId"] == unit
    forgotten = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c1",
        name="memory_forget",
        arguments={"id": source["id"]},
    )
    assert forgotten == {"status": "deleted", "id": source["id"]}
    assert hindsight.units("shared") == []
    assert not ExternalRecord.objects.filter(record_id=source["id"]).exists()


# A provider's record id is kept only when the mapping can keep it (1 to 1,024 UTF-8
# bytes, no NUL); any other makes the provider's answer invalid, on every database.

UNKEPT_IDS = {
    "1025 characters": "x" * 1025,
    "1025 UTF-8 bytes": "\u00e9" * 512 + "x",
    "empty": "",
    "a number": 12345,
    "null": None,
}


@pytest.mark.parametrize("odd", UNKEPT_IDS.values(), ids=UNKEPT_IDS.keys())
def test_an_id_the_mapping_cannot_keep_makes_the_answer_invalid(
    api: APIClient, project: Project, mem0_oss: FakeMem0Oss, odd: object
) -> None:
    _mem0(project, mem0_oss)
    mem0_oss.seed("Alice likes tea.", user_id="alice", agent_id="archivist")
    seeded = mem0_oss.seed("Alice likes jazz.", user_id="alice", agent_id="archivist")
    mem0_oss.memories[seeded]["id"] = odd

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
    assert (
        "a record id that is not a string of 1 to 1024 UTF-8 bytes" in (entry.detail["description"])
    )

    session = external_session(project, "alice")
    with pytest.raises(RecallFailed) as failed:
        recall_create(session=session, use=["mem"], input_text="Alice likes what?")
    assert failed.value.details == {
        "resource": "mem",
        "reason": "provider_failed",
        "retryable": False,
    }
    assert AuditEntry.objects.filter(action="provider.failed").count() == 2
    assert not ExternalRecord.objects.exists()
    assert not Recall.objects.exists()


# An answer's lists hold JSON objects, for every kind (`RemoteStore.objects`): an item that
# is not one makes the whole answer invalid, never left out while the rest is shown.

KINDS = ["mem0-oss", "mem0-platform", "vertex-memory-bank", "hindsight"]
# Per kind: the answers listing memories (method, path, the key of the list), and the
# history's (method, path, the key of the list, or None when the answer is the list).
MEMORY_LISTS = {
    "mem0-oss": [("GET", r"/memories", "results"), ("POST", r"/search", "results")],
    "mem0-platform": [
        ("POST", r"/v3/memories/", "results"),
        ("POST", r"/v3/memories/search/", "results"),
    ],
    "vertex-memory-bank": [("POST", r".*/memories:retrieve", "retrievedMemories")],
    "hindsight": [
        ("GET", r".*/memories/list", "items"),
        ("POST", r".*/memories/recall", "results"),
    ],
}
HISTORIES = {
    "mem0-oss": ("GET", r"/memories/[^/]+/history", None),
    "mem0-platform": ("GET", r"/v1/memories/[^/]+/history/", None),
    "vertex-memory-bank": ("GET", r".*/memories/[^/]+/revisions", "memoryRevisions"),
    "hindsight": ("GET", r".*/memories/[^/]+/history", None),
}
NOT_OBJECTS = {"a string": "Alice likes jazz.", "null": None, "a list": [{"id": "m-2"}]}


def _deployed_with_facts(kind: str, project: Project, request: pytest.FixtureRequest) -> FakeServer:
    """A resource `mem` of `kind` on its fake server, with two facts of namespace alice."""
    facts = ["Alice likes tea.", "Alice likes jazz."]
    if kind == "mem0-oss":
        oss: FakeMem0Oss = request.getfixturevalue("mem0_oss")
        _mem0(project, oss)
        for fact in facts:
            oss.seed(fact, user_id="alice", agent_id="archivist")
        return oss
    if kind == "mem0-platform":
        platform: FakeMem0Platform = request.getfixturevalue("mem0_platform")
        deploy_external(
            project,
            {
                "kind": "mem0-platform",
                "baseUrl": platform.origin,
                "apiKey": {"secret": "MEM0_API_KEY"},
                "scope": {"user_id": "{namespace}"},
            },
            secrets_by_origin={platform.origin: {"MEM0_API_KEY": "mem0-platform-key"}},
        )
        for fact in facts:
            platform.seed(fact, user_id="alice")
        return platform
    if kind == "vertex-memory-bank":
        vertex: FakeVertexMemoryBank = request.getfixturevalue("vertex")
        _vertex(project, vertex)
        for fact in facts:
            vertex.seed(fact, {"user_id": "alice"})
        return vertex
    hindsight: FakeHindsight = request.getfixturevalue("hindsight")
    deploy_external(
        project,
        {
            "kind": "hindsight",
            "baseUrl": hindsight.origin,
            "bankId": "{namespace}",
            "headers": {"Authorization": {"secret": "HINDSIGHT_TOKEN", "scheme": "Bearer"}},
        },
        secrets_by_origin={hindsight.origin: {"HINDSIGHT_TOKEN": HINDSIGHT_TOKEN}},
    )
    hindsight.seed("alice", " ".join(facts))
    return hindsight


def _appended(key: str | None, item: object) -> Any:
    def edit(answer: Any) -> Any:
        if key is None:
            return [*answer, item]
        return {**answer, key: [*answer.get(key, []), item]}

    return edit


def _invalid(response: Any) -> None:
    assert response.status_code == 502, response.json()
    assert response.json()["error"] == {
        "code": "provider_failed",
        "message": "The memory provider of 'mem' failed; trying again will not help until "
        "its owners fix it (the audit log has the details).",
        "details": {"resource": "mem", "retryable": False},
    }


@pytest.mark.parametrize("odd", NOT_OBJECTS.values(), ids=NOT_OBJECTS.keys())
@pytest.mark.parametrize("kind", KINDS)
def test_a_listed_memory_that_is_not_an_object_makes_the_answer_invalid(
    api: APIClient, project: Project, request: pytest.FixtureRequest, kind: str, odd: object
) -> None:
    server = _deployed_with_facts(kind, project, request)
    for method, path, key in MEMORY_LISTS[kind]:
        server.change(method, path, _appended(key, odd))

    _invalid(api.get(RECORDS + ALICE))
    _invalid(api.get(RECORDS + ALICE + "&q=what+does+Alice+like"))
    session = external_session(project, "alice")
    with pytest.raises(RecallFailed) as failed:
        recall_create(session=session, use=["mem"], input_text="What does Alice like?")
    assert failed.value.details == {
        "resource": "mem",
        "reason": "provider_failed",
        "retryable": False,
    }

    entries = AuditEntry.objects.filter(action="provider.failed")
    assert len(entries) == 3
    for entry in entries:
        assert entry.detail["reason"] == "invalid_response"
        assert "is not an object" in entry.detail["description"], entry.detail
    assert not ExternalRecord.objects.exists()
    assert not Recall.objects.exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_history_entry_that_is_not_an_object_makes_the_answer_invalid(
    api: APIClient, project: Project, request: pytest.FixtureRequest, kind: str
) -> None:
    server = _deployed_with_facts(kind, project, request)
    listed = api.get(RECORDS + ALICE)
    assert listed.status_code == 200, listed.json()
    record = listed.json()["records"][0]["id"]
    method, path, key = HISTORIES[kind]
    server.change(method, path, _appended(key, "an earlier text"))

    _invalid(api.get(f"{RECORDS}/{record}/history{ALICE}"))
    entry = AuditEntry.objects.get(action="provider.failed")
    assert entry.detail["reason"] == "invalid_response"
    assert "is not an object" in entry.detail["description"], entry.detail
    # The records the list mapped stay as they were.
    assert ExternalRecord.objects.count() == 2


# A get of one memory is "not found" only when the provider says so (its 404; Mem0 OSS's
# `null`, how its server answers a memory it does not have): any other answer that is not
# a JSON object is invalid, and a delete, which reads the memory first, forgets nothing.

RECORD_GETS = {
    "mem0-oss": ("GET", r"/memories/[^/]+"),
    "mem0-platform": ("GET", r"/v1/memories/[^/]+/"),
    "vertex-memory-bank": ("GET", r".*/memories/[^/:]+"),
    "hindsight": ("GET", r".*/memories/(?!list$)[^/]+"),
}
UNREADABLE = [
    pytest.param(kind, odd, id=f"{kind}-{name}")
    for kind in KINDS
    for name, odd in NOT_OBJECTS.items()
    if (kind, name) != ("mem0-oss", "null")
]


def _answered(odd: object) -> Any:
    return lambda answer: odd


def _mapped_record(api: APIClient, text: str) -> tuple[str, set[tuple[str, str]]]:
    """The id of alice's record holding `text`, once the list mapped them all, and the
    mapping as it stands."""
    listed = api.get(RECORDS + ALICE)
    assert listed.status_code == 200, listed.json()
    (record,) = [r["id"] for r in listed.json()["records"] if text in r["text"]]
    return record, set(ExternalRecord.objects.values_list("record_id", "external_id"))


@pytest.mark.parametrize(("kind", "odd"), UNREADABLE)
def test_a_memory_answered_as_no_object_is_an_invalid_answer_and_is_not_deleted(
    api: APIClient, project: Project, request: pytest.FixtureRequest, kind: str, odd: object
) -> None:
    server = _deployed_with_facts(kind, project, request)
    record, mapping = _mapped_record(api, "jazz")
    server.change(*RECORD_GETS[kind], _answered(odd))

    _invalid(api.get(f"{RECORDS}/{record}{ALICE}"))
    _invalid(api.delete(f"{RECORDS}/{record}{ALICE}"))
    entries = AuditEntry.objects.filter(action="provider.failed").order_by("id")
    assert [(e.detail["operation"], e.detail["reason"]) for e in entries] == [
        ("get", "invalid_response"),
        ("get", "invalid_response"),
    ]
    for entry in entries:
        assert "the memory is not a JSON object" in entry.detail["description"], entry.detail
    # Nothing sent, nothing forgotten, nothing reported deleted: the memory is still there.
    assert server.seen("DELETE", r".*") == []
    assert set(ExternalRecord.objects.values_list("record_id", "external_id")) == mapping
    assert not AuditEntry.objects.filter(action="record.delete").exists()
    assert not ProviderOperation.objects.exists()
    server.changes.clear()
    shown = api.get(f"{RECORDS}/{record}{ALICE}")
    assert shown.status_code == 200, shown.json()
    assert "jazz" in shown.json()["text"]


def _erasure_failed(
    api: APIClient, server: FakeServer, record: str, mapping: set[tuple[str, str]]
) -> dict[str, Any]:
    """An erasure of the record's text, whose provider's answer about the record is no
    record gone: the receipt is incomplete and names the record failed (a dead letter),
    no delete is sent and the record's mapping is kept. The receipt's entry for it."""
    made = api.post(
        "/api/managed-agents/projects/acme/memory/erasures" + DEV,
        {"match": {"text": "likes jazz"}, "reason": "ASI06 incident"},
        format="json",
    )
    assert made.status_code == 201, made.json()
    body = made.json()
    assert body["complete"] is False
    external = body["receipt"]["receipt"]["external"]
    assert (external["deleted"], external["queued"]) == ([], [])
    (failed,) = external["failed"]
    assert {k: failed[k] for k in ("resource", "namespace", "record")} == {
        "resource": "mem",
        "namespace": "alice",
        "record": record,
    }
    dead = ProviderOperation.objects.get(pk=failed["operation"])
    assert (dead.state, dead.action, dead.record_id) == ("dead", "delete", record)
    assert server.seen("DELETE", r".*") == []
    assert set(ExternalRecord.objects.values_list("record_id", "external_id")) == mapping
    return dict(failed)


@pytest.mark.parametrize(("kind", "odd"), UNREADABLE)
def test_an_erasure_names_a_memory_answered_as_no_object_failed_not_deleted(
    api: APIClient, project: Project, request: pytest.FixtureRequest, kind: str, odd: object
) -> None:
    server = _deployed_with_facts(kind, project, request)
    record, mapping = _mapped_record(api, "jazz")
    server.change(*RECORD_GETS[kind], _answered(odd))
    failed = _erasure_failed(api, server, record, mapping)
    assert "failed" in failed["error"]
    server.changes.clear()
    assert api.get(f"{RECORDS}/{record}{ALICE}").status_code == 200


# A 404 is a record gone only when it is the provider's own answer that it has no such
# record (the error body its API answers so; Mem0 OSS answers a get with `null`). A 404 of
# anything else (a proxy's HTML page, an empty body, a framework's answer for a route it
# does not have, as a wrong base URL gets) says nothing of the record: the call fails, and
# nothing is forgotten or reported deleted.

RECORD_DELETES = {
    "mem0-oss": ("DELETE", r"/memories/[^/]+"),
    "mem0-platform": ("DELETE", r"/v1/memories/[^/]+/"),
    "vertex-memory-bank": ("DELETE", r".*/memories/[^/:]+"),
    "hindsight": ("DELETE", r".*/documents/.+"),
}
NGINX_404 = Raw(
    b"<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n<center><h1>404 Not "
    b"Found</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)
# FastAPI's answer for a route it does not have (Mem0 OSS's and Hindsight's servers).
UNKNOWN_ROUTE = {"detail": "Not Found"}
NOT_THE_PROVIDERS_404 = {
    "an HTML page": NGINX_404,
    "no body": Raw(b"", "text/plain"),
    "an unknown route": UNKNOWN_ROUTE,
}
STRAY_404S = [
    pytest.param(kind, body, id=f"{kind}-{name}")
    for kind in KINDS
    for name, body in NOT_THE_PROVIDERS_404.items()
]


def _vanished(server: FakeServer) -> None:
    """Every memory of the fake server deleted there (by someone else)."""
    if isinstance(server, FakeHindsight):
        server.banks.clear()
    else:
        server.memories.clear()  # type: ignore[attr-defined]


def _failed_with_404(operation: str) -> None:
    (entry,) = AuditEntry.objects.filter(action="provider.failed")
    assert (entry.detail["operation"], entry.detail["reason"]) == (operation, "http_error")
    assert entry.detail["status"] == 404, entry.detail
    entry.delete()


@pytest.mark.parametrize(("kind", "body"), STRAY_404S)
def test_a_404_that_is_not_the_providers_no_such_memory_fails_and_deletes_nothing(
    api: APIClient, project: Project, request: pytest.FixtureRequest, kind: str, body: Any
) -> None:
    server = _deployed_with_facts(kind, project, request)
    record, mapping = _mapped_record(api, "jazz")
    server.answer(*RECORD_GETS[kind], 404, body)

    _invalid(api.get(f"{RECORDS}/{record}{ALICE}"))
    _failed_with_404("get")
    _invalid(api.delete(f"{RECORDS}/{record}{ALICE}"))
    _failed_with_404("get")
    # Nothing sent, nothing forgotten, nothing reported deleted: the memory is still there.
    assert server.seen("DELETE", r".*") == []
    assert set(ExternalRecord.objects.values_list("record_id", "external_id")) == mapping
    assert not AuditEntry.objects.filter(action="record.delete").exists()
    assert not ProviderOperation.objects.exists()
    server.routes.pop(0)
    shown = api.get(f"{RECORDS}/{record}{ALICE}")
    assert shown.status_code == 200, shown.json()
    assert "jazz" in shown.json()["text"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_delete_answered_a_404_that_is_not_the_providers_fails_and_keeps_the_record(
    api: APIClient, project: Project, request: pytest.FixtureRequest, kind: str
) -> None:
    """The get found the memory; a delete a proxy in front answers with its own 404 page
    removed nothing, so the record stays mapped and is not reported deleted."""
    server = _deployed_with_facts(kind, project, request)
    record, mapping = _mapped_record(api, "jazz")
    server.answer(*RECORD_DELETES[kind], 404, NGINX_404)

    _invalid(api.delete(f"{RECORDS}/{record}{ALICE}"))
    operation = "delete_document" if kind == "hindsight" else "delete"
    _failed_with_404(operation)
    assert len(server.seen(*RECORD_DELETES[kind])) == 1
    assert set(ExternalRecord.objects.values_list("record_id", "external_id")) == mapping
    assert not AuditEntry.objects.filter(action="record.delete").exists()
    server.routes.pop(0)
    assert "jazz" in api.get(f"{RECORDS}/{record}{ALICE}").json()["text"]


@pytest.mark.parametrize("meanwhile", [False, True], ids=["before", "between-get-and-delete"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_memory_the_provider_says_it_does_not_have_is_deleted_and_forgotten(
    api: APIClient, project: Project, request: pytest.FixtureRequest, kind: str, meanwhile: bool
) -> None:
    """The provider's own answer for a memory it does not have (Mem0 OSS's `null` to a get,
    or the 404 its API answers so) is a record gone: the delete forgets it."""
    server = _deployed_with_facts(kind, project, request)
    record, mapping = _mapped_record(api, "jazz")
    if meanwhile:
        # Deleted by someone else once the get found it: the delete's own 404 says so.
        def vanish_after(answer: Any) -> Any:
            _vanished(server)
            return answer

        server.change(*RECORD_GETS[kind], vanish_after)
    else:
        _vanished(server)

    deleted = api.delete(f"{RECORDS}/{record}{ALICE}")
    assert deleted.status_code == 200, deleted.json()
    assert deleted.json() == {"status": "deleted", "id": record}
    assert len(server.seen(*RECORD_DELETES[kind])) == (1 if meanwhile else 0)
    assert not AuditEntry.objects.filter(action="provider.failed").exists()
    assert set(ExternalRecord.objects.values_list("record_id", "external_id")) == {
        (r, e) for r, e in mapping if r != record
    }
    again = api.get(f"{RECORDS}/{record}{ALICE}")
    assert (again.status_code, again.json()["error"]["code"]) == (404, "not_found")


@pytest.mark.parametrize("kind", KINDS)
def test_an_erasure_names_a_memory_answered_a_stray_404_failed_not_deleted(
    api: APIClient, project: Project, request: pytest.FixtureRequest, kind: str
) -> None:
    server = _deployed_with_facts(kind, project, request)
    record, mapping = _mapped_record(api, "jazz")
    server.answer(*RECORD_GETS[kind], 404, UNKNOWN_ROUTE)
    _erasure_failed(api, server, record, mapping)
    server.routes.pop(0)
    assert api.get(f"{RECORDS}/{record}{ALICE}").status_code == 200


def test_a_mem0_oss_base_url_off_its_routes_deletes_nothing(
    api: APIClient, project: Project, mem0_oss: FakeMem0Oss
) -> None:
    """Mem0 OSS answers a memory it does not have with `null`: a 404 from a base URL that
    misses its routes (FastAPI's own `{"detail": "Not Found"}`) is a failure, not a gone
    memory, and the memory stays mapped."""
    resource = deploy_external(
        project,
        mem0_declaration(mem0_oss, baseUrl=mem0_oss.origin + "/mem0"),
        secrets_by_origin={mem0_oss.origin: {"MEM0_KEY": MEM0_KEY}},
    )
    external = mem0_oss.seed("Alice likes jazz.", user_id="alice", agent_id="archivist")
    record = records_map(resource=resource, namespace="alice", external_ids=[external])[external]

    _invalid(api.delete(f"{RECORDS}/{record}{ALICE}"))
    _failed_with_404("get")
    assert [c.path for c in mem0_oss.calls] == [f"/mem0/memories/{external}"]
    assert mem0_oss.memories[external]["memory"] == "Alice likes jazz."
    assert ExternalRecord.objects.filter(record_id=record, external_id=external).exists()
    assert not AuditEntry.objects.filter(action="record.delete").exists()


def test_the_longest_id_kept_is_1024_utf8_bytes(
    api: APIClient, project: Project, hindsight: FakeHindsight
) -> None:
    deploy_external(
        project,
        {
            "kind": "hindsight",
            "baseUrl": hindsight.origin,
            "bankId": "team",
            "headers": {"Authorization": {"secret": "HINDSIGHT_TOKEN", "scheme": "Bearer"}},
        },
        secrets_by_origin={hindsight.origin: {"HINDSIGHT_TOKEN": HINDSIGHT_TOKEN}},
    )
    longest = "\U0001f600" * 256  # 4 bytes each
    [unit] = hindsight.seed("team", "The office closes at six.")
    units = hindsight.bank("team")["units"]
    units[longest] = {**units.pop(unit), "id": longest}
    listed = api.get(RECORDS + ALICE)
    assert listed.status_code == 200, listed.json()
    assert [r["metadata"]["providerExternalId"] for r in listed.json()["records"]] == [longest]
    assert ExternalRecord.objects.get().external_id == longest

    units[longest + "x"] = {**units[longest], "id": longest + "x"}
    refused = api.get(RECORDS + ALICE)
    assert refused.status_code == 502, refused.json()
    assert AuditEntry.objects.get(action="provider.failed").detail["reason"] == ("invalid_response")
    assert ExternalRecord.objects.count() == 1


# Owner calls stop when their caller goes away, as a session's calls do (spec 004: the
# adapter aborts each attempt's child signal when the caller cancels). The fake holds the
# provider call for 30 s, the deadline is 30 s: only a cancellation ends it sooner.


def _mem0(project: Project, server: FakeMem0Oss) -> Resource:
    return deploy_external(
        project, mem0_declaration(server), secrets_by_origin={server.origin: {"MEM0_KEY": MEM0_KEY}}
    )


def _archivist_deployment(project: Project) -> str:
    return str(
        ActiveDeployment.objects.get(
            project=project, environment="development", agent="archivist"
        ).deployment_id
    )


def _server_env(settings: Any) -> dict[str, str]:
    return clean_env(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DJANGO_SECRET_KEY=settings.SECRET_KEY,
        DATABASE_URL=suite_database_url(),
        DATABASE_POOL="0",
        MEMORYADMIN_PROVIDER_DEADLINE_SECONDS="30",
    )


def _gives_up(call: Any) -> None:
    """Sends a request and goes away after a second without its answer."""
    with pytest.raises(httpx.ReadTimeout):
        call(timeout=httpx.Timeout(30, read=1.0))


@pytest.mark.django_db(transaction=True)
def test_an_api_client_that_goes_away_stops_its_record_calls_and_leaves_its_write_open(
    project: Project, mem0_oss: FakeMem0Oss, keys: Keys, settings: Any
) -> None:
    _mem0(project, mem0_oss)
    stall = mem0_oss.stall("/memories")
    headers = {"x-api-key": keys.owner}
    with gunicorn(_server_env(settings)) as base:
        _gives_up(lambda **kw: httpx.get(base + RECORDS + ALICE, headers=headers, **kw))
        wait_until(lambda: stall.abandoned == 1, "the server to stop the list call", seconds=8)
        _gives_up(
            lambda **kw: httpx.post(
                base + RECORDS + ALICE, json={"text": "Maybe kept."}, headers=headers, **kw
            )
        )
        wait_until(lambda: stall.abandoned == 2, "the server to stop the add", seconds=8)
        wait_until(ProviderOperation.objects.exists, "the open operation")
    # Sent once, never retried after the cancel; whether it happened is the provider's.
    assert len(mem0_oss.seen("POST", "/memories")) == 1
    operation = ProviderOperation.objects.get()
    assert (operation.kind, operation.state, operation.action, operation.record_id) == (
        "cancelled_write",
        "queued",
        "add",
        "",
    )
    assert operation.principal.startswith("key:mak_")
    assert (operation.namespace, operation.session_id) == ("alice", None)
    assert operation.deployment_id == _archivist_deployment(project)
    entry = AuditEntry.objects.get(action="record.create")
    assert entry.detail["status"] == "cancelled"
    assert entry.detail["operation"] == operation.id


@pytest.mark.django_db(transaction=True)
def test_a_browser_that_goes_away_stops_the_pages_provider_call(
    project: Project, mem0_oss: FakeMem0Oss, people: People, settings: Any
) -> None:
    _mem0(project, mem0_oss)
    browser = Client()
    browser.force_login(people.owner)
    cookies = {"sessionid": browser.cookies["sessionid"].value}
    page = reverse("web:records", args=["acme", "development", "mem"]) + "?namespace=alice"
    stall = mem0_oss.stall("/memories")
    with gunicorn(_server_env(settings)) as base:
        _gives_up(lambda **kw: httpx.get(base + page, cookies=cookies, **kw))
        wait_until(lambda: stall.abandoned == 1, "the server to stop the page's call", seconds=8)
    assert len(mem0_oss.seen("GET", "/memories")) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_cli_cancels_its_provider_call_and_records_the_write(
    project: Project, mem0_oss: FakeMem0Oss, settings: Any, number: int
) -> None:
    """An interrupt, a kill or a closed terminal: the edit in flight is cut at once, the
    command ends with the cancellation (exit 7) and the edit is an open operation."""
    _mem0(project, mem0_oss)
    external = mem0_oss.seed("Ships on Fridays.", user_id="alice", agent_id="archivist")
    mem = Resource.objects.get(resource_id="mem", environment="development")
    record_id = records_map(resource=mem, namespace="alice", external_ids=[external])[external]
    stall = mem0_oss.stall(f"/memories/{external}", method="PUT")
    command = [
        sys.executable,
        "manage.py",
        "records",
        "--project",
        "acme",
        "edit",
        "mem",
        record_id,
        "--namespace",
        "alice",
        "--text",
        "Ships on Mondays.",
    ]
    env = _server_env(settings)
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert stall.arrived.wait(30), process.stderr
        started = time.monotonic()
        process.send_signal(number)
        _, stderr = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert time.monotonic() - started < 5  # not the 30 s deadline
    assert process.returncode == 7, stderr
    assert "cancelled" in stderr
    assert stall.abandoned == 1
    assert len(mem0_oss.seen("PUT", f"/memories/{external}")) == 1
    operation = ProviderOperation.objects.get()
    assert operation.id in stderr
    assert (operation.kind, operation.action, operation.record_id, operation.namespace) == (
        "cancelled_write",
        "update",
        record_id,
        "alice",
    )
    assert operation.principal.startswith("cli:")


# What the durable operation store records (spec 004: the provider operation name, scope,
# principal, profile revision, deadline, attempt count and operation kind), and what the
# write was, so an owner reading a dead letter knows what to check and retry.

OPERATIONS = "/api/managed-agents/projects/acme/memory/operations" + DEV


@pytest.fixture
def quick(settings: Any) -> Any:
    settings.MEMORYADMIN_OPERATION_BACKOFF_SECONDS = 0
    settings.MEMORYADMIN_OPERATION_MAX_ATTEMPTS = 10
    settings.MEMORYADMIN_JOB_BACKOFF_SECONDS = 0
    return settings


def _vertex(project: Project, server: FakeVertexMemoryBank, **extra: Any) -> Resource:
    declaration = {
        "kind": "vertex-memory-bank",
        "baseUrl": server.origin,
        "project": "acme-prod",
        "location": "us-central1",
        "reasoningEngine": "4242",
        "credentials": {"secret": "VERTEX_SA", "type": "service-account"},
        "scope": {"user_id": "{namespace}"},
        **extra,
    }
    return deploy_external(
        project,
        declaration,
        secrets_by_origin={server.origin: {"VERTEX_SA": server.account_json()}},
    )


def test_owner_writes_record_what_they_were_and_the_deployment_they_ran_under(
    api: APIClient, project: Project, vertex: FakeVertexMemoryBank, quick: Any
) -> None:
    _vertex(project, vertex)
    first = _archivist_deployment(project)
    vertex.seed("Alice likes tea.", {"user_id": "alice"})
    [record] = api.get(RECORDS + ALICE).json()["records"]
    added = api.post(RECORDS + ALICE, {"text": "Alice is vegetarian."}, format="json")
    updated = api.patch(f"{RECORDS}/{record['id']}{ALICE}", {"text": "Coffee."}, format="json")
    # A new deployment of the resource: later writes run under it, earlier ones keep theirs.
    _vertex(project, vertex, maxBytes=4096)
    second = _archivist_deployment(project)
    assert second != first
    deleted = api.delete(f"{RECORDS}/{record['id']}{ALICE}")
    assert [r.status_code for r in (added, updated, deleted)] == [202, 202, 202]

    listed = {o["id"]: o for o in api.get(OPERATIONS).json()["operations"]}
    keys = ("action", "recordId", "deploymentId", "tool", "recallId")
    what = [
        tuple(listed[r.json()["operation"]][k] for k in keys) for r in (added, updated, deleted)
    ]
    assert what == [
        ("add", "", first, "", ""),
        ("update", record["id"], first, "", ""),
        ("delete", record["id"], second, "", ""),
    ]
    for response in (added, updated, deleted):
        operation = listed[response.json()["operation"]]
        assert operation["providerOperation"] == response.json()["providerOperation"]
        assert (operation["kind"], operation["namespace"]) == ("accepted_write", "alice")
        assert operation["principal"].startswith("key:mak_")


def test_a_sessions_writes_record_the_tool_the_record_and_the_sessions_deployment(
    api: APIClient, project: Project, vertex: FakeVertexMemoryBank, quick: Any
) -> None:
    _vertex(project, vertex)
    vertex.seed("Alice's desk is by the window.", {"user_id": "alice"})
    session = external_session(project, "alice")
    recall = recall_create(session=session, use=["mem"], input_text="Where is the desk?")
    [source] = recall["memory"]["mem"]["sources"]

    def call(call_id: str, name: str, arguments: dict[str, Any]) -> ProviderOperation:
        result = tool_call(
            session=session,
            recall_id=recall["recallId"],
            call_id=call_id,
            name=name,
            arguments=arguments,
        )
        assert result["status"] == "accepted", result
        return ProviderOperation.objects.get(pk=result["operation"])

    added = call("c1", "memory_add", {"text": "Alice prefers mornings."})
    forgotten = call("c2", "memory_forget", {"id": source["id"]})
    assert [(o.action, o.tool, o.call_id, o.record_id) for o in (added, forgotten)] == [
        ("add", "memory_add", "c1", ""),
        ("delete", "memory_forget", "c2", source["id"]),
    ]
    assert {o.deployment_id for o in (added, forgotten)} == {session.deployment_id}
    assert {o.session_id for o in (added, forgotten)} == {session.id}
    # The API shows the recall each write answered.
    shown = api.get(f"{OPERATIONS}&session={session.id}").json()["operations"]
    assert {(o["id"], o["callId"], o["recallId"]) for o in shown} == {
        (added.id, "c1", recall["recallId"]),
        (forgotten.id, "c2", recall["recallId"]),
    }


def test_an_operation_past_its_deadline_is_a_dead_letter_with_attempts_left(
    api: APIClient, owner: Any, project: Project, vertex: FakeVertexMemoryBank, quick: Any
) -> None:
    _vertex(project, vertex)
    vertex.seed("Alice likes tea.", {"user_id": "alice"})
    [record] = api.get(RECORDS + ALICE).json()["records"]
    # Within its deadline, an operation the provider has not finished stays queued...
    quick.MEMORYADMIN_OPERATION_DEADLINE_SECONDS = 3600
    kept = api.delete(f"{RECORDS}/{record['id']}{ALICE}").json()["operation"]
    jobs_run_due()
    assert ProviderOperation.objects.get(pk=kept).state == "queued"
    # ...past it, the first check that finds it unfinished makes it a dead letter, with
    # nine of its ten attempts left: never a success.
    quick.MEMORYADMIN_OPERATION_DEADLINE_SECONDS = 0
    late = api.patch(f"{RECORDS}/{record['id']}{ALICE}", {"text": "Coffee."}, format="json")
    late_id = late.json()["operation"]
    jobs_run_due()
    dead = ProviderOperation.objects.get(pk=late_id)
    assert (dead.state, dead.attempts, dead.max_attempts) == ("dead", 1, 10)
    assert dead.finished_at is not None
    assert [o["id"] for o in api.get(OPERATIONS + "&state=dead").json()["operations"]] == [late_id]
    # The Memory page shows what it was.
    page = html_of(owner.get("/projects/acme/development/resources/mem/"))
    assert late_id in page
    assert f"Update <code>{record['id']}</code>" in page
    entry = AuditEntry.objects.get(action="operation.dead_letter")
    assert (entry.detail["operation"], entry.detail["action"], entry.detail["recordId"]) == (
        late_id,
        "update",
        record["id"],
    )
