"""Mem0 OSS as an external provider, against a fake self-hosted Mem0 server on loopback:
declarations and URL rules, records through the API, ids that survive a restart of our
server, recall and tools in a session, retries, cancellation and secrets kept out of sight."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import httpx
import pytest
from rest_framework.test import APIClient

from memoryadmin.agents.services.runtime import recall_create, tool_call
from memoryadmin.core.cancellation import Cancelled
from memoryadmin.external.ids import external_memory_id, provider_id
from memoryadmin.external.models import ExternalRecord
from memoryadmin.memory.models import AuditEntry, Project, Resource
from memoryadmin.memory.services.deployments import deployment_create
from tests.fake_providers import FakeMem0Oss
from tests.helpers import (
    DEV,
    Keys,
    clean_env,
    deploy_external,
    external_provider,
    external_session,
    gunicorn,
    manage,
)

KEY_SECRET = "mem0-test-key"
RECORDS = "/api/managed-agents/projects/acme/memory/mem/records"
ALICE = DEV + "&namespace=alice"


def declaration(server: FakeMem0Oss, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "mem0-oss",
        "baseUrl": server.origin,
        "scope": {"user_id": "{namespace}", "agent_id": "archivist"},
        "headers": {"X-API-Key": {"secret": "MEM0_KEY"}},
        **extra,
    }


@pytest.fixture
def mem(project: Project, mem0_oss: FakeMem0Oss) -> Resource:
    return deploy_external(
        project,
        declaration(mem0_oss),
        secrets_by_origin={mem0_oss.origin: {"MEM0_KEY": KEY_SECRET}},
    )


def _deploy(project: Project, provider: dict[str, Any]) -> None:
    deployment_create(
        project=project,
        agent="archivist",
        memory=[{"id": "mem", "description": "External.", "provider": provider}],
        actor="t",
    )


# Declarations: the kind is explicit, the URL is checked before anything else.


@pytest.mark.parametrize(
    ("base_url", "message"),
    [
        ("http://93.184.216.34", "must use https://"),
        ("https://user:pw@93.184.216.34", "must not contain user-info"),
        ("https://93.184.216.34/api?x=1", "must not contain a query string"),
        ("https://93.184.216.34/#top", "must not contain a fragment"),
        ("https://\u043f\u0440\u0438\u043c\u0435\u0440.com", "baseUrl must be ASCII: write an"),
        ("https://93.184.216.34/m\u00e9moire", "baseUrl must be ASCII: write an"),
        ("ftp://93.184.216.34", "other schemes are not allowed"),
        ("https://10.0.0.5", "private"),
    ],
)
def test_a_bad_base_url_is_400_naming_the_field(
    api: APIClient, project: Project, base_url: str, message: str, settings: Any
) -> None:
    settings.MEMORYADMIN_PROVIDER_ALLOW = []
    provider = {
        "kind": "mem0-oss",
        "baseUrl": base_url,
        # A secret that does not exist: the URL is refused before any secret matters.
        "headers": {"X-API-Key": {"secret": "NOT_SET"}},
    }
    response = api.post(
        "/api/managed-agents/projects/acme/deployments",
        {
            "agent": "archivist",
            "memory": [{"id": "mem", "description": "E.", "provider": provider}],
        },
        format="json",
    )
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["message"].startswith("memory[0].provider.baseUrl ")
    assert message in error["message"]
    assert not Resource.objects.filter(resource_id="mem").exists()


def test_cleartext_is_allowed_on_loopback_only(project: Project, mem0_oss: FakeMem0Oss) -> None:
    _deploy(project, declaration(mem0_oss))  # http://127.0.0.1:<port>
    with pytest.raises(Exception, match="must use https://"):
        _deploy(project, {"kind": "mem0-oss", "baseUrl": "http://93.184.216.34:8888"})


def test_the_kind_is_never_inferred_from_the_url(project: Project) -> None:
    with pytest.raises(Exception, match=r"provider\.kind must be one of"):
        _deploy(project, {"baseUrl": "https://api.mem0.ai", "kind": "mem0"})


def test_declared_credentials_must_be_secret_references(project: Project) -> None:
    with pytest.raises(Exception, match="must reference a managed secret"):
        _deploy(
            project,
            {"kind": "mem0-oss", "baseUrl": "http://127.0.0.1:9", "headers": {"X-API-Key": "k"}},
        )


def test_a_secret_bound_elsewhere_refuses_promotion(
    project: Project, mem0_oss: FakeMem0Oss
) -> None:
    with pytest.raises(Exception, match="would send secret MEM0_KEY"):
        deploy_external(
            project,
            declaration(mem0_oss),
            secrets_by_origin={"https://elsewhere.example.com": {"MEM0_KEY": KEY_SECRET}},
        )


def test_deployments_show_secret_names_never_values(api: APIClient, mem: Resource) -> None:
    body = api.get("/api/managed-agents/projects/acme/deployments").json()
    provider = body["deployments"][0]["memory"][0]["provider"]
    assert provider["kind"] == "mem0-oss"
    assert provider["headers"] == {"X-API-Key": {"secret": "MEM0_KEY"}}
    assert KEY_SECRET not in str(body)


# Records through the API.


def test_records_life_through_the_api(api: APIClient, mem: Resource, mem0_oss: FakeMem0Oss) -> None:
    created = api.post(RECORDS + ALICE, {"text": "Alice prefers tea."}, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["status"] == "stored"
    record = created.json()["records"][0]
    external = record["metadata"]["providerExternalId"]
    assert mem0_oss.memories[external]["memory"] == "Alice prefers tea."
    assert mem0_oss.memories[external]["user_id"] == "alice"
    assert mem0_oss.memories[external]["agent_id"] == "archivist"
    assert record["id"] == external_memory_id(provider_id(mem), external)
    assert ExternalRecord.objects.get(record_id=record["id"]).external_id == external
    # The secret went to the provider, as a header.
    assert mem0_oss.seen("POST", "/memories")[0].headers["X-API-Key"] == KEY_SECRET

    one = api.get(f"{RECORDS}/{record['id']}{ALICE}")
    assert one.status_code == 200
    assert one.json()["text"] == "Alice prefers tea."

    listed = api.get(RECORDS + ALICE).json()
    assert [r["id"] for r in listed["records"]] == [record["id"]]
    assert listed["nextCursor"] is None

    found = api.get(RECORDS + ALICE + "&q=tea").json()["records"]
    assert [r["id"] for r in found] == [record["id"]]

    updated = api.patch(
        f"{RECORDS}/{record['id']}{ALICE}", {"text": "Alice prefers coffee."}, format="json"
    )
    assert updated.status_code == 200, updated.json()
    assert updated.json()["record"]["text"] == "Alice prefers coffee."
    assert mem0_oss.memories[external]["memory"] == "Alice prefers coffee."

    history = api.get(f"{RECORDS}/{record['id']}/history{ALICE}").json()["history"]
    assert [(h["action"], h["text"]) for h in history] == [
        ("create", "Alice prefers tea."),
        ("update", "Alice prefers coffee."),
    ]
    assert history[1]["previousText"] == "Alice prefers tea."

    deleted = api.delete(f"{RECORDS}/{record['id']}{ALICE}")
    assert deleted.status_code == 200
    assert deleted.json() == {"status": "deleted", "id": record["id"]}
    assert external not in mem0_oss.memories
    assert not ExternalRecord.objects.filter(record_id=record["id"]).exists()
    assert api.get(f"{RECORDS}/{record['id']}{ALICE}").status_code == 404

    actions = list(
        AuditEntry.objects.filter(action__startswith="record.").values_list("action", flat=True)
    )
    assert sorted(actions) == ["record.create", "record.delete", "record.update"]


def test_records_of_another_namespace_are_not_found(
    api: APIClient, mem: Resource, mem0_oss: FakeMem0Oss
) -> None:
    made = api.post(RECORDS + ALICE, {"text": "Alice's secret plan."}, format="json").json()
    record_id = made["records"][0]["id"]
    other = DEV + "&namespace=bob"
    assert api.get(f"{RECORDS}/{record_id}{other}").status_code == 404
    assert api.delete(f"{RECORDS}/{record_id}{other}").status_code == 404
    assert api.get(RECORDS + other).json()["records"] == []
    assert len(mem0_oss.memories) == 1


def test_existing_provider_memory_is_listed_with_stable_ids(
    api: APIClient, mem: Resource, mem0_oss: FakeMem0Oss
) -> None:
    external = mem0_oss.seed("Met Alice in Lisbon.", user_id="alice", agent_id="archivist")
    mem0_oss.seed("Bob's note.", user_id="bob", agent_id="archivist")
    first = api.get(RECORDS + ALICE).json()["records"]
    again = api.get(RECORDS + ALICE).json()["records"]
    assert [r["metadata"]["providerExternalId"] for r in first] == [external]
    assert first[0]["id"] == again[0]["id"]
    assert ExternalRecord.objects.filter(external_id=external).count() == 1


def test_namespace_is_required_and_checked(api: APIClient, mem: Resource) -> None:
    for query in (DEV, DEV + "&namespace=", DEV + "&namespace=a%20b"):
        response = api.get(RECORDS + query)
        assert response.status_code == 400
        assert "namespace is required" in response.json()["error"]["message"]


def test_read_only_keys_cannot_change_records(
    client_for: Any, keys: Keys, mem: Resource, mem0_oss: FakeMem0Oss
) -> None:
    reader = client_for(keys.read_only)
    response = reader.post(RECORDS + ALICE, {"text": "x"}, format="json")
    assert response.status_code == 403
    assert mem0_oss.memories == {}


def test_document_resources_have_no_records(api: APIClient, notes: Resource) -> None:
    response = api.get("/api/managed-agents/projects/acme/memory/notes/records" + ALICE)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "not_supported"


def test_provider_failures_are_generic_and_audited(
    api: APIClient, mem: Resource, mem0_oss: FakeMem0Oss
) -> None:
    mem0_oss.fail_next = [500, 500, 500]
    response = api.get(RECORDS + ALICE)
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "provider_failed"
    assert error["details"] == {"resource": "mem", "retryable": True}
    assert "500" not in error["message"]
    entry = AuditEntry.objects.get(action="provider.failed")
    assert entry.detail["status"] == 500
    assert entry.detail["attempts"] == 3


def test_reads_are_retried_and_adds_are_not(
    api: APIClient, mem: Resource, mem0_oss: FakeMem0Oss
) -> None:
    mem0_oss.fail_next = [503]
    assert api.get(RECORDS + ALICE).status_code == 200
    assert len(mem0_oss.seen("GET", "/memories")) == 2

    mem0_oss.fail_next = [503]
    response = api.post(RECORDS + ALICE, {"text": "Once only."}, format="json")
    assert response.status_code == 502
    assert len(mem0_oss.seen("POST", "/memories")) == 1
    assert mem0_oss.memories == {}


def test_secrets_never_reach_responses_or_logs(
    api: APIClient, mem: Resource, mem0_oss: FakeMem0Oss, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    bodies = [
        api.post(RECORDS + ALICE, {"text": "A fact."}, format="json").content,
        api.get(RECORDS + ALICE).content,
    ]
    mem0_oss.fail_next = [401, 401, 401]
    bodies.append(api.get(RECORDS + ALICE).content)
    for body in bodies:
        assert KEY_SECRET.encode() not in body
    assert KEY_SECRET not in caplog.text
    for entry in AuditEntry.objects.all():
        assert KEY_SECRET not in str(entry.detail)


# The provider's ids in request paths: one segment each, whatever they hold.

HOSTILE_ID = "../../admin?x=1#y"


def test_a_providers_id_reaches_exactly_its_encoded_path(
    api: APIClient, mem: Resource, mem0_oss: FakeMem0Oss
) -> None:
    """An id that, written into the path as it is, would step out of the base path (the
    one its secret is bound to) and add a query and a fragment, is one encoded segment."""
    mem0_oss.seed("A hostile id.", memory_id=HOSTILE_ID, user_id="alice", agent_id="archivist")
    listed = api.get(RECORDS + ALICE).json()["records"]
    assert [r["metadata"]["providerExternalId"] for r in listed] == [HOSTILE_ID]
    record_id = listed[0]["id"]
    mem0_oss.calls.clear()

    one = api.get(f"{RECORDS}/{record_id}{ALICE}")
    assert one.status_code == 200, one.json()
    assert one.json()["text"] == "A hostile id."
    deleted = api.delete(f"{RECORDS}/{record_id}{ALICE}")
    assert deleted.json() == {"status": "deleted", "id": record_id}

    encoded = "/memories/..%2F..%2Fadmin%3Fx%3D1%23y"
    sent = [(c.method, c.path, c.query) for c in mem0_oss.calls]
    # The read, then the delete's look and the delete itself: nothing else.
    assert sent == [("GET", encoded, {}), ("GET", encoded, {}), ("DELETE", encoded, {})]
    assert HOSTILE_ID not in mem0_oss.memories
    assert not ExternalRecord.objects.filter(record_id=record_id).exists()


@pytest.mark.parametrize("dots", [".", ".."])
def test_an_id_that_is_a_step_in_the_path_is_never_sent(
    api: APIClient, mem: Resource, mem0_oss: FakeMem0Oss, dots: str
) -> None:
    mem0_oss.seed("Dots.", memory_id=dots, user_id="alice", agent_id="archivist")
    record_id = api.get(RECORDS + ALICE).json()["records"][0]["id"]
    mem0_oss.calls.clear()
    for response in (
        api.get(f"{RECORDS}/{record_id}{ALICE}"),
        api.delete(f"{RECORDS}/{record_id}{ALICE}"),
    ):
        assert response.status_code == 502
        assert response.json()["error"]["code"] == "provider_failed"
    assert mem0_oss.calls == []
    assert dots in mem0_oss.memories
    entry = AuditEntry.objects.filter(action="provider.failed").first()
    assert entry is not None
    assert "cannot be sent in a path" in entry.detail["description"]


# Sessions: recall with the input, the model's tools.


def test_recall_searches_with_the_input_within_max_bytes(
    project: Project, mem: Resource, mem0_oss: FakeMem0Oss
) -> None:
    tea = mem0_oss.seed(
        "Alice drinks green tea every morning.", user_id="alice", agent_id="archivist"
    )
    mem0_oss.seed(
        "Alice's tea kettle is blue. " + "x" * 9000, user_id="alice", agent_id="archivist"
    )
    mem0_oss.seed("Bob drinks tea.", user_id="bob", agent_id="archivist")
    session = external_session(project, "alice")
    recall = recall_create(session=session, use=["mem"], input_text="What tea does Alice drink?")
    memory = recall["memory"]["mem"]
    # The long record does not fit maxBytes (8192) and is left out whole, never cut.
    assert memory["text"] == "Alice drinks green tea every morning."
    assert memory["sources"][0]["id"] == external_memory_id(provider_id(mem), tea)
    assert memory["writable"] is True
    search = mem0_oss.seen("POST", "/search")[-1].body
    assert search["query"] == "What tea does Alice drink?"
    assert search["filters"] == {"user_id": "alice", "agent_id": "archivist"}
    names = [tool["name"] for tool in recall["tools"]]
    assert names == ["memory_add", "memory_search", "memory_forget"]


def test_tools_add_search_and_forget_in_a_session(
    project: Project, mem: Resource, mem0_oss: FakeMem0Oss
) -> None:
    session = external_session(project, "alice")
    recall = recall_create(session=session, use=["mem"], input_text=None)
    added = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c1",
        name="memory_add",
        arguments={"text": "Alice's birthday is in May."},
    )
    assert added["status"] == "stored"
    record_id = added["ids"][0]
    found = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c2",
        name="memory_search",
        arguments={"query": "birthday"},
    )
    assert [r["id"] for r in found["results"]] == [record_id]
    forgotten = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c3",
        name="memory_forget",
        arguments={"id": record_id},
    )
    assert forgotten == {"status": "deleted", "id": record_id}
    assert mem0_oss.memories == {}
    again = recall_create(session=session, use=["mem"], input_text="birthday")
    assert again["memory"]["mem"] == {"text": "", "sources": [], "writable": True}


def test_a_failed_recall_blocks_and_is_never_empty(
    project: Project, mem: Resource, mem0_oss: FakeMem0Oss
) -> None:
    from memoryadmin.agents.errors import RecallFailed

    session = external_session(project, "alice")
    mem0_oss.fail_next = [502, 502, 502]
    with pytest.raises(RecallFailed) as failed:
        recall_create(session=session, use=["mem"], input_text="anything")
    assert failed.value.details["resource"] == "mem"


def test_an_add_whose_answer_is_lost_is_uncertain(
    project: Project, mem: Resource, mem0_oss: FakeMem0Oss, settings: Any
) -> None:
    settings.MEMORYADMIN_PROVIDER_DEADLINE_SECONDS = 0.5
    session = external_session(project, "alice")
    recall = recall_create(session=session, use=["mem"], input_text=None)
    stall = mem0_oss.stall("/memories")
    result = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c1",
        name="memory_add",
        arguments={"text": "Slow write."},
    )
    stall.release.set()
    assert result == {"status": "uncertain"}
    assert len(mem0_oss.seen("POST", "/memories")) == 1


def test_a_cancelled_attempt_stops_at_once(mem: Resource, mem0_oss: FakeMem0Oss) -> None:
    cancelled = threading.Event()
    store = external_provider("mem0-oss").open(mem, "alice", cancelled=cancelled)
    stall = mem0_oss.stall("/search")
    timer = threading.Timer(0.2, cancelled.set)
    started = time.monotonic()
    timer.start()
    with pytest.raises(Cancelled):
        store.search("anything", 5)
    elapsed = time.monotonic() - started
    stall.release.set()
    assert stall.arrived.is_set()
    # Well before the 10 s deadline, and not retried after the cancel.
    assert elapsed < 3
    assert len(mem0_oss.seen("POST", "/search")) == 1


# Ids across a restart of our server.


@pytest.mark.django_db(transaction=True)
def test_record_ids_resolve_after_a_server_restart(
    tmp_path: Any, mem0_oss: FakeMem0Oss, migrated_sqlite: Any
) -> None:
    env = clean_env(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DATABASE_URL=f"sqlite:///{migrated_sqlite(tmp_path / 'db.sqlite3')}",
        MEMORYADMIN_VAR_DIR=str(tmp_path / "var"),
    )
    setup = manage(
        "shell",
        "-c",
        "from memoryadmin.memory.services.projects import project_create\n"
        "from memoryadmin.memory.services.deployments import deployment_create\n"
        "from memoryadmin.memory.services.keys import api_key_create\n"
        "from memoryadmin.providers.services.secrets import secret_set\n"
        "p = project_create(project_id='acme', name='Acme', actor='test')\n"
        f"secret_set(project=p, environment='development', name='MEM0_KEY', value='{KEY_SECRET}',"
        f" origins=['{mem0_oss.origin}'], actor='t')\n"
        "deployment_create(project=p, agent='archivist', memory=[{'id': 'mem', 'description':"
        f" 'E.', 'provider': {declaration(mem0_oss)!r}}}], promote='development', actor='t')\n"
        "print(api_key_create(project_id='acme', name='k')[1])",
        env=env,
    )
    assert setup.returncode == 0, setup.stderr
    headers = {"x-api-key": setup.stdout.strip().splitlines()[-1]}
    with gunicorn(env) as base:
        created = httpx.post(base + RECORDS + ALICE, json={"text": "Kept."}, headers=headers)
        assert created.status_code == 201, created.text
        record_id = created.json()["records"][0]["id"]
    external = next(iter(mem0_oss.memories))
    with gunicorn(env) as base:
        fetched = httpx.get(f"{base}{RECORDS}/{record_id}{ALICE}", headers=headers)
        assert fetched.json()["metadata"]["providerExternalId"] == external
        deleted = httpx.delete(f"{base}{RECORDS}/{record_id}{ALICE}", headers=headers)
        assert deleted.status_code == 200, deleted.text
    assert mem0_oss.memories == {}
    assert mem0_oss.seen("DELETE", f"/memories/{external}")


def test_the_egress_rule_applies_on_every_call(
    api: APIClient, project: Project, mem0_oss: FakeMem0Oss, settings: Any
) -> None:
    by_name = mem0_oss.origin.replace("127.0.0.1", "localhost")
    deploy_external(
        project,
        declaration(mem0_oss, baseUrl=by_name),
        secrets_by_origin={by_name: {"MEM0_KEY": KEY_SECRET}},
    )
    assert api.get(RECORDS + ALICE).status_code == 200
    settings.MEMORYADMIN_PROVIDER_ALLOW = []  # loopback is no longer allowed
    calls = len(mem0_oss.calls)
    response = api.get(RECORDS + ALICE)
    assert response.status_code == 502
    assert len(mem0_oss.calls) == calls
    entry = AuditEntry.objects.get(action="provider.failed")
    assert entry.detail["reason"] == "egress_refused"
    assert "loopback" in entry.detail["description"]


def test_the_runtime_cancel_stops_an_add_in_flight_and_leaves_it_open(
    project: Project, mem: Resource, mem0_oss: FakeMem0Oss
) -> None:
    from memoryadmin.agents.models import ProviderOperation
    from memoryadmin.agents.services.runtime import call_cancel

    session = external_session(project, "alice")
    recall = recall_create(session=session, use=["mem"], input_text=None)
    stall = mem0_oss.stall("/memories")

    def cancel_when_sent() -> None:
        assert stall.arrived.wait(10)
        call_cancel(session=session, call_id="c-slow")

    canceller = threading.Thread(target=cancel_when_sent)
    canceller.start()
    started = time.monotonic()
    result = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c-slow",
        name="memory_add",
        arguments={"text": "Maybe stored."},
    )
    elapsed = time.monotonic() - started
    canceller.join()
    stall.release.set()
    assert result == {"status": "cancelled"}
    assert elapsed < 5  # not the 10 s deadline
    assert len(mem0_oss.seen("POST", "/memories")) == 1  # never retried
    operation = ProviderOperation.objects.get(session=session)
    assert (operation.kind, operation.state, operation.call_id) == (
        "cancelled_write",
        "queued",
        "c-slow",
    )


def test_a_cancel_during_the_wait_before_a_retry_ends_the_call_at_once(
    project: Project, mem: Resource, mem0_oss: FakeMem0Oss
) -> None:
    """The provider asks for 5 s before the next attempt; the caller cancels 0.3 s in: the
    call ends cancelled then, and the second attempt is never sent."""
    from memoryadmin.agents.services.runtime import call_cancel

    session = external_session(project, "alice")
    recall = recall_create(session=session, use=["mem"], input_text=None)
    mem0_oss.fail_next = [503]
    mem0_oss.headers = {"Retry-After": "5"}
    canceller = threading.Timer(0.3, lambda: call_cancel(session=session, call_id="c-wait"))
    started = time.monotonic()
    canceller.start()
    result = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c-wait",
        name="memory_search",
        arguments={"query": "tea"},
    )
    elapsed = time.monotonic() - started
    canceller.join()
    assert result == {"status": "cancelled"}
    assert elapsed < 1.3, elapsed  # 0.3 s, then at most a poll: not the 5 s asked for
    assert len(mem0_oss.seen("POST", "/search")) == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_first_sightings_map_a_record_once(
    project: Project, mem0_oss: FakeMem0Oss
) -> None:
    from memoryadmin.external.ids import records_map
    from tests.helpers import run_threads

    mem = deploy_external(
        project,
        declaration(mem0_oss),
        secrets_by_origin={mem0_oss.origin: {"MEM0_KEY": KEY_SECRET}},
    )
    ids = run_threads(
        6, lambda _: records_map(resource=mem, namespace="alice", external_ids=["mem-1"])["mem-1"]
    )
    assert len(set(ids)) == 1
    assert ExternalRecord.objects.filter(resource=mem, external_id="mem-1").count() == 1
