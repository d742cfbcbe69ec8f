"""The Python SDK and the example agent host against a live server over real HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_type_hints

import pytest
from django.utils import timezone

from memoryadmin.agents.models import Session, SessionEvent
from memoryadmin.memory.models import (
    ApiKey,
    Deployment,
    Document,
    DocumentVersion,
    Project,
    Resource,
)
from memoryadmin.memory.services.deployments import resource_get
from memoryadmin.memory.services.keys import api_key_create
from memoryadmin_client import (
    ApiError,
    AsyncClient,
    Client,
    CreatedSession,
    DocumentDeleted,
    EnsuredDocument,
    StartedSession,
)
from tests.helpers import MANIFEST_MEMORY, run_example

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def api_key(project: Project) -> str:
    return api_key_create(project_id=project.id)[1]


@pytest.fixture
def client(live_server: Any, api_key: str) -> Iterator[Client]:
    with Client(live_server.url, api_key, project="acme") as client:
        yield client


def test_start_session_on_document_creates_both_then_converges(
    client: Client, notes: Resource
) -> None:
    first = client.start_session_on_document(
        agent="support-bot",
        resource="notes",
        document_id="workshop",
        document={"title": "Workshop notes", "text": "Node.js 22."},
        idempotency_key="topic/workshop/1",
    )
    assert (first["document"]["created"], first["session"]["created"]) == (True, True)
    assert first["document"]["document"]["title"] == "Workshop notes"
    session = first["session"]["session"]
    assert session["memory"] == [
        {
            "resource": "notes",
            "scope": "document",
            "id": "workshop",
            "access": "read-write",
            "writable": True,
        }
    ]
    assert first["session"]["deployment"]["id"] == session["deploymentId"]
    again = client.start_session_on_document(
        agent="support-bot",
        resource="notes",
        document_id="workshop",
        document={"title": "Ignored now", "text": "Ignored."},
        idempotency_key="topic/workshop/1",
    )
    assert (again["document"]["created"], again["session"]["created"]) == (False, False)
    assert again["session"]["session"]["id"] == session["id"]
    assert again["document"]["document"]["text"] == "Node.js 22."
    stored = Session.objects.get()
    assert stored.idempotency_key == "topic/workshop/1:session"
    assert Document.objects.get(resource=notes).title == "Workshop notes"


def test_session_results_are_the_typed_dicts_the_docs_promise(
    live_server: Any, api_key: str, client: Client, notes: Resource
) -> None:
    """create_session, ensure_document and start_session_on_document answer plain dicts
    with the keys of their TypedDicts, sync and async, as every other call does."""
    memory = {"notes": {"scope": "document", "id": "workshop", "access": "read"}}
    client.create_document("notes", "workshop", title="Workshop", text="v1")
    created = client.create_session(agent="support-bot", idempotency_key="typed", memory=memory)
    assert isinstance(created, dict)
    assert set(created) == set(get_type_hints(CreatedSession))
    assert created["created"] is True
    assert created["deployment"]["id"] == created["session"]["deploymentId"]
    assert json.loads(json.dumps(created)) == created

    async def again() -> CreatedSession:
        async with AsyncClient(live_server.url, api_key, project="acme") as client:
            return await client.create_session(
                agent="support-bot", idempotency_key="typed", memory=memory
            )

    rejoined = asyncio.run(again())
    assert isinstance(rejoined, dict)
    assert (rejoined["created"], rejoined["session"]["id"]) == (False, created["session"]["id"])
    started = client.start_session_on_document(
        agent="support-bot", resource="notes", document_id="plan", idempotency_key="typed"
    )
    assert set(started) == set(get_type_hints(StartedSession))
    assert set(started["document"]) == set(get_type_hints(EnsuredDocument))
    assert set(started["session"]) == set(get_type_hints(CreatedSession))
    assert started["document"]["document"]["id"] == "plan"
    # The attributes of the dataclasses these were still read, with a warning.
    with pytest.warns(DeprecationWarning, match=r"use \['session'\]"):
        assert created.session == created["session"]  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        created.nothing  # type: ignore[attr-defined]  # noqa: B018


def test_start_session_on_deleted_document_fails_before_any_session(
    client: Client, notes: Resource
) -> None:
    created = client.create_document("notes", "gone", title="Gone")
    client.delete_document("notes", "gone", revision=created["revision"])
    with pytest.raises(DocumentDeleted) as raised:
        client.start_session_on_document(
            agent="support-bot", resource="notes", document_id="gone", idempotency_key="t/gone"
        )
    assert raised.value.status == 404
    assert not Session.objects.exists()


@pytest.mark.parametrize("key", ["k" * 249, "clé"])
def test_start_session_with_a_key_no_session_takes_creates_no_document(
    client: Client, notes: Resource, key: str
) -> None:
    with pytest.raises(ValueError, match="1-248 printable ASCII"):
        client.start_session_on_document(
            agent="support-bot", resource="notes", document_id="topic", idempotency_key=key
        )
    assert not Document.objects.exists()
    assert not Session.objects.exists()


def test_start_session_with_another_binding_under_the_same_key_is_a_conflict(
    client: Client, notes: Resource
) -> None:
    client.start_session_on_document(
        agent="support-bot", resource="notes", document_id="a", idempotency_key="topic"
    )
    with pytest.raises(ApiError) as raised:
        client.start_session_on_document(
            agent="support-bot", resource="notes", document_id="b", idempotency_key="topic"
        )
    assert (raised.value.status, raised.value.code) == (409, "idempotency_conflict")
    assert raised.value.details == {"differs": ["memory"]}
    assert Session.objects.count() == 1


def test_documents_with_revisions_and_errors(client: Client, notes: Resource) -> None:
    created = client.create_document("notes", "doc", title="Doc", text="one", summary="s")
    assert (created["text"], created["writer"]) == ("one", {"kind": "owner"})
    with pytest.raises(ApiError) as exists:
        client.create_document("notes", "doc", title="Again")
    assert (exists.value.status, exists.value.code) == (412, "precondition_failed")
    replaced = client.replace_document("notes", "doc", revision=created["revision"], text="two")
    assert (replaced["text"], replaced["summary"]) == ("two", "s")
    with pytest.raises(ApiError) as stale:
        client.replace_document("notes", "doc", revision=created["revision"], text="three")
    assert stale.value.status == 412
    # A quoted ETag kept verbatim works as well as the bare revision.
    frozen = client.patch_document(
        "notes", "doc", revision=f'"{replaced["revision"]}"', agent_writes="disabled"
    )
    assert frozen["agentWrites"] == "disabled"
    assert client.get_document("notes", "doc") == frozen
    client.delete_document("notes", "doc", revision=frozen["revision"])
    with pytest.raises(ApiError) as missing:
        client.get_document("notes", "doc")
    assert (missing.value.status, missing.value.code) == (404, "not_found")
    assert Document.objects.get(doc_id="doc").deleted
    assert DocumentVersion.objects.filter(document__doc_id="doc").count() == 3


def test_ids_from_users_reach_the_server_as_ids_never_as_other_paths(
    client: Client, project: Project, make_document: Any
) -> None:
    """An application passes its users' document ids on: one that reads as a path or a
    query is refused as an id, and reaches no other document, resource or environment."""
    kb = resource_get(project=project, environment="development", resource_id="kb")
    secret = make_document("secret", text="kb only", resource=kb)
    make_document("x", text="x's text")
    for doc_id in ("..", ".", "x?environment=production", "x#y"):
        with pytest.raises(ApiError) as refused:
            client.get_document("notes", doc_id)
        assert refused.value.status in (400, 404), doc_id
        assert refused.value.code in ("invalid_request", "not_found"), doc_id
    # A server decodes %2F into '/' before it routes: an id holding one would name another
    # route (x/versions: document x's versions, read as if they were a document). No id
    # has one; the client sends none.
    climbing = "../../kb/documents/secret"
    for doc_id in (climbing, "x/versions", "x/", "/"):
        with pytest.raises(ValueError, match="cannot hold '/'"):
            client.get_document("notes", doc_id)
    with pytest.raises(ValueError, match="cannot hold '/'"):
        client.replace_document("notes", climbing, revision=secret.revision, text="overwritten")
    with pytest.raises(ValueError, match="cannot hold '/'"):
        client.delete_document("notes", climbing, revision=secret.revision)
    with pytest.raises(ValueError, match="cannot hold '/'"):
        client.get_document("kb/documents/secret/documents", "x")
    with pytest.raises(ValueError, match="cannot hold '/'"):
        client.get_session("../projects/acme/memory")
    with pytest.raises(ValueError, match="cannot be empty"):
        client.get_document("notes", "")
    kept = Document.objects.get(pk=secret.pk)
    assert (kept.text, kept.revision, kept.deleted) == ("kb only", secret.revision, False)
    assert Document.objects.get(doc_id="x").text == "x's text"
    # Ids that are ids go through as they are.
    assert client.get_document("kb", "secret")["text"] == "kb only"


def test_iter_documents_follows_every_page(client: Client, make_document: Any) -> None:
    # One more than a page; created directly, since creating through the SDK is tested above.
    for i in range(51):
        make_document(f"d{i:02d}")
    first = client.list_documents("notes")
    assert len(first["documents"]) == 50
    assert first["nextCursor"] is not None
    ids = [entry["id"] for entry in client.iter_documents("notes")]
    assert sorted(ids) == [f"d{i:02d}" for i in range(51)]
    inventory = {r["id"]: r["documents"] for r in client.memory_inventory()}
    assert inventory["notes"] == 51


def test_deployments(client: Client, project: Project) -> None:
    deployment = client.create_deployment("sales-bot", MANIFEST_MEMORY)
    assert deployment["activeIn"] == []
    promoted = client.promote_deployment(deployment["id"], "production")
    assert promoted["activeIn"] == ["production"]
    assert client.get_deployment(deployment["id"])["agent"] == "sales-bot"
    listed = client.list_deployments(agent="sales-bot")
    assert [d["id"] for d in listed] == [deployment["id"]]
    assert project.deployments.filter(agent="sales-bot").count() == 1
    # More than a page: the client follows the pages to the last.
    Deployment.objects.bulk_create(
        Deployment(id=f"dep_bulk{i:03d}", project=project, agent="bulk-bot") for i in range(51)
    )
    everything = client.list_deployments()
    assert len(everything) == Deployment.objects.filter(project=project).count() == 53
    assert len({d["id"] for d in everything}) == 53


def test_sessions_runtime_and_events(client: Client, notes: Resource) -> None:
    client.create_document("notes", "workshop", title="Workshop", text="v1")
    created = client.create_session(
        agent="support-bot",
        idempotency_key="raw-key",
        memory={"notes": {"scope": "document", "id": "workshop", "access": "read-write"}},
        labels={"user": "u1"},
    )
    assert created["created"] is True
    session_id = created["session"]["id"]
    assert client.get_session(session_id)["labels"] == {"user": "u1"}
    listed = client.list_sessions(status="active")
    assert [s["id"] for s in listed["sessions"]] == [session_id]

    recall = client.recall(session_id, use=["notes"], input_text="hello")
    assert recall["memory"]["notes"]["text"] == "v1"
    assert [t["name"] for t in recall["tools"]] == ["memory_save"]
    saved = client.tool_call(
        session_id, recall_id=recall["recallId"], name="memory_save", arguments={"text": "v2"}
    )
    assert saved["status"] == "saved"
    conflict = client.tool_call(
        session_id, recall_id=recall["recallId"], name="memory_save", arguments={"text": "v3"}
    )
    assert conflict == {"status": "conflict", "text": "v2", "summary": ""}
    with pytest.raises(ApiError) as malformed:
        client.tool_call(
            session_id, recall_id=recall["recallId"], name="memory_save", arguments={"txt": "x"}
        )
    assert (malformed.value.status, malformed.value.code) == (400, "invalid_tool_arguments")

    ended = client.end_session(session_id)
    assert ended["status"] == "ended"
    assert ended["memory"][0]["writable"] is False
    events = list(client.iter_session_events(session_id))
    assert [(e["seq"], e["type"]) for e in events] == [
        (1, "session.created"),
        (2, "memory.saved"),
        (3, "session.ended"),
    ]
    assert events[1]["data"]["revision"] == saved["revision"]
    assert client.session_events(session_id, after=2)["events"][0]["type"] == "session.ended"
    assert Document.objects.get(doc_id="workshop").text == "v2"
    assert SessionEvent.objects.filter(session_id=session_id).count() == 3


def test_api_errors_carry_status_code_and_message(live_server: Any, project: Project) -> None:
    with (
        Client(live_server.url, "mak_not-a-key", project="acme") as client,
        pytest.raises(ApiError) as raised,
    ):
        client.get_session("ses_x")
    assert (raised.value.status, raised.value.code) == (401, "unauthorized")
    assert raised.value.message


def test_example_agent_host_runs_its_scenario(
    live_server: Any, api_key: str, project: Project
) -> None:
    completed = run_example("agent_host.py", live_server.url, api_key)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    out = completed.stdout
    assert "memory_save -> saved" in out
    assert "memory_save -> conflict" in out
    assert "events: 1 session.created, 2 memory.saved, 3 memory.saved, 4 session.ended" in out
    session = Session.objects.get()
    assert session.status == "ended"
    document = Document.objects.get(doc_id="agent-host-example")
    assert "- Owner: the room is booked." in document.text
    assert document.text.count("Decided") == 2
    assert (document.writer_kind, document.writer_session_id) == ("agent", session.id)


def test_api_keys_list_create_rotate_revoke(live_server: Any, client: Client, api_key: str) -> None:
    made = client.create_api_key(name="ci", read_only=True)
    assert made["secret"].startswith("mak_")
    assert made["readOnly"] is True
    listed = {key["prefix"]: key for key in client.list_api_keys()}
    assert set(listed) == {made["prefix"], api_key[:12]}
    assert "secret" not in listed[made["prefix"]]
    rotated = client.rotate_api_key(made["id"], grace_seconds=0)
    assert rotated["name"] == "ci"
    assert rotated["prefix"] != made["prefix"]
    with Client(live_server.url, made["secret"], project="acme") as old:
        with pytest.raises(ApiError) as caught:
            old.list_documents("notes")
        assert caught.value.status == 401
    revoked = client.revoke_api_key(rotated["id"])
    assert revoked["revokedAt"] is not None
    # More than a page (revoked keys stay listed): the client follows the pages.
    ApiKey.objects.bulk_create(
        ApiKey(
            project_id="acme", prefix=f"mak_old{i:05d}", hashed=f"old{i}", revoked_at=timezone.now()
        )
        for i in range(50)
    )
    everything = client.list_api_keys()
    assert len({key["prefix"] for key in everything}) == len(everything) == 53
    with Client(live_server.url, rotated["secret"], project="acme") as gone:
        with pytest.raises(ApiError) as caught:
            gone.list_documents("notes")
        assert caught.value.code == "unauthorized"


def test_client_restores_reads_the_audit_log_exports_and_imports(
    client: Client, project: Project, notes: Resource
) -> None:
    first = client.create_document("notes", "workshop", title="Workshop", text="Node 22.")
    second = client.replace_document(
        "notes", "workshop", revision=first["revision"], text="Node 24."
    )
    restored = client.restore_version(
        "notes", "workshop", first["revision"], revision=second["revision"]
    )
    assert restored["text"] == "Node 22."
    with pytest.raises(ApiError) as stale:
        client.restore_version("notes", "workshop", first["revision"], revision=second["revision"])
    assert stale.value.status == 412
    actions = [e["action"] for e in client.iter_audit(resource="notes", document="workshop")]
    assert actions == ["document.restore", "document.replace", "document.create"]
    page = client.list_audit(action="document.create")
    assert [e["document"] for e in page["entries"]] == ["workshop"]

    archive = client.export_memory(resources=["notes"])
    assert archive.startswith(b"PK")
    report = client.import_memory(archive)
    assert (report["created"], report["skipped"], report["failed"]) == (0, 1, 0)
    assert report["documents"][0]["reason"] == "exists"
    with pytest.raises(ApiError) as missing:
        client.export_memory(resources=["nope"])
    assert missing.value.status == 404
    assert Document.objects.get(doc_id="workshop").text == "Node 22."
    hits = client.search_memory("node")["documents"]
    assert [(h["resource"], h["id"]) for h in hits] == [("notes", "workshop")]
    assert "<mark>Node</mark>" in hits[0]["snippet"]
    assert client.list_documents("notes", q="nothing")["documents"] == []
    redacted = client.redact_version("notes", "workshop", second["revision"], reason="Leak.")
    assert redacted["redacted"] is not None
    assert (redacted["text"], redacted["redacted"]["reason"]) == ("[redacted]", "Leak.")
    with pytest.raises(ApiError) as current:
        client.redact_version("notes", "workshop", restored["revision"], reason="Leak.")
    assert current.value.status == 409


def test_client_manages_webhooks_and_verifies_their_deliveries(
    client: Client, notes: Resource
) -> None:
    from memoryadmin.runner.jobs import job_run
    from memoryadmin.runner.models import Job
    from memoryadmin_client.webhooks import verify
    from tests.helpers import Receiver, serve

    for receiver in serve(Receiver()):
        made = client.create_webhook(receiver.url, ["document.created"], description="Ops")
        assert made["secret"].startswith("whsec_")
        assert client.list_webhooks() == [{k: v for k, v in made.items() if k != "secret"}]
        client.create_document("notes", "plan", title="Plan", text="One.")
        # The server handed the job to the task backend; run it here, as a worker would.
        for job in Job.objects.filter(state="pending"):
            job_run(job.pk)
        ((headers, body, _),) = receiver.received
        event = verify(made["secret"], headers, body)
        assert (event["type"], event["data"]["document"]) == ("document.created", "plan")
        page = client.list_webhook_deliveries(made["id"])
        (delivery,) = page["deliveries"]
        assert (delivery["eventId"], delivery["state"]) == (event["id"], "delivered")
        again = client.redeliver_webhook(made["id"], delivery["id"])
        assert (again["state"], again["attempts"]) == ("pending", 0)
        paused = client.update_webhook(made["id"], active=False)
        assert paused["active"] is False
        assert client.get_webhook(made["id"])["active"] is False
        rotated = client.rotate_webhook_secret(made["id"])
        assert rotated["secret"] not in {made["secret"], ""}
        client.delete_webhook(made["id"])
        with pytest.raises(ApiError) as gone:
            client.get_webhook(made["id"])
        assert (gone.value.status, gone.value.code) == (404, "webhook_not_found")


def test_client_manages_records_of_an_external_provider(
    client: Client, project: Project, mem0_oss: Any
) -> None:
    from tests.helpers import deploy_external

    deploy_external(
        project,
        {
            "kind": "mem0-oss",
            "baseUrl": mem0_oss.origin,
            "scope": {"user_id": "{namespace}", "agent_id": "archivist"},
            "headers": {"X-API-Key": {"secret": "MEM0_KEY"}},
        },
        secrets_by_origin={mem0_oss.origin: {"MEM0_KEY": "mem0-test-key"}},
    )
    made = client.create_record("mem", "alice", "Alice prefers tea.")
    assert made["status"] == "stored"
    (record,) = made["records"]
    assert client.get_record("mem", "alice", record["id"])["text"] == "Alice prefers tea."
    assert [r["id"] for r in client.list_records("mem", "alice")["records"]] == [record["id"]]
    assert [r["id"] for r in client.list_records("mem", "alice", q="tea")["records"]] == [
        record["id"]
    ]
    assert client.list_records("mem", "bob")["records"] == []
    changed = client.update_record("mem", "alice", record["id"], "Alice prefers coffee.")
    assert changed["record"]["text"] == "Alice prefers coffee."
    history = client.record_history("mem", "alice", record["id"])
    assert [(h["action"], h["text"]) for h in history] == [
        ("create", "Alice prefers tea."),
        ("update", "Alice prefers coffee."),
    ]
    assert client.delete_record("mem", "alice", record["id"]) == {
        "status": "deleted",
        "id": record["id"],
    }
    with pytest.raises(ApiError) as gone:
        client.get_record("mem", "alice", record["id"])
    assert gone.value.status == 404


def test_client_follows_a_queued_write_to_its_end(
    client: Client, project: Project, mem0_platform: Any, settings: Any
) -> None:
    from memoryadmin.agents.models import ProviderOperation
    from memoryadmin.runner.jobs import job_run
    from tests.helpers import deploy_external

    settings.MEMORYADMIN_OPERATION_BACKOFF_SECONDS = 0
    settings.MEMORYADMIN_JOB_BACKOFF_SECONDS = 0
    deploy_external(
        project,
        {
            "kind": "mem0-platform",
            "baseUrl": mem0_platform.origin,
            "apiKey": {"secret": "MEM0_API_KEY"},
            "scope": {"user_id": "{namespace}"},
        },
        secrets_by_origin={mem0_platform.origin: {"MEM0_API_KEY": "mem0-platform-key"}},
    )
    mem0_platform.queued_imports = True
    made = client.create_record("mem", "alice", "Alice lives in Austin.")
    assert made["status"] == "queued"
    queued = client.get_operation(made["operation"])
    assert (queued["id"], queued["state"], queued["kind"]) == (
        made["operation"],
        "queued",
        "accepted_write",
    )
    assert client.list_operations(state="open")["operations"] == [queued]
    # Its checks run here, as a worker would run them (the server's commit handed the job
    # to the task backend).
    job_id = ProviderOperation.objects.get(pk=made["operation"]).job_id
    assert job_id is not None
    states = []
    for _ in range(2):
        job_run(job_id)
        states.append(client.get_operation(made["operation"])["state"])
    assert states == ["queued", "succeeded"]
    assert client.list_operations(state="open")["operations"] == []
    with pytest.raises(ApiError) as missing:
        client.get_operation("mop_nothing")
    assert missing.value.status == 404
