"""The hot paths' database budget: round trips per request, counted, so it cannot creep up.

The budget (docs/performance.md): a document read in one round trip,
a conditional write in at most 4 statements (transaction statements count).
Transactions are real here (not the test's savepoints), and the per-minute
`last_used_at` write is done before counting.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from rest_framework.test import APIClient

from memoryadmin.agents.mcp import MemoryDoor
from memoryadmin.agents.models import Recall, RecallSource, Session
from memoryadmin.memory.models import AuditEntry, Document, DocumentVersion, Project, Resource
from memoryadmin.memory.services.deployments import deployment_create
from memoryadmin.memory.services.documents import document_create, document_delete
from tests.helpers import Keys, html_of, is_postgres

DOCS = "/api/managed-agents/projects/acme/memory/notes/documents"
ENV = "?environment=development"


def counted(call: Any) -> tuple[Any, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        response = call()
    return response, [q["sql"] for q in captured.captured_queries]


@pytest.mark.django_db(transaction=True)
def test_get_document_is_one_round_trip_with_the_key(
    api: APIClient, keys: Keys, make_document: Any, client_for: Any, notes: Resource
) -> None:
    make_document("workshop", text="Node 22.")
    gone = make_document("gone", text="Old.")
    document_delete(resource=notes, doc_id="gone", expected_revision=gone.revision, actor="t")
    api.get(f"{DOCS}/workshop{ENV}")  # the key's last use is recorded once a minute
    response, queries = counted(lambda: api.get(f"{DOCS}/workshop{ENV}"))
    assert response.status_code == 200
    assert response.json()["text"] == "Node 22."
    # The key, the resource and the live document in one query.
    assert len(queries) == 1, queries
    for missing in ("gone", "nothing"):
        response, queries = counted(lambda d=missing: api.get(f"{DOCS}/{d}{ENV}"))
        assert (response.status_code, response.json()["error"]["code"]) == (404, "not_found")
        assert len(queries) == 1, queries
    # Read with the key, never shown to a key of another project.
    other = client_for(keys.other)
    other.get(f"{DOCS}/workshop{ENV}")
    response, queries = counted(lambda: other.get(f"{DOCS}/workshop{ENV}"))
    assert response.status_code == 403, response.content
    assert b"Node 22." not in response.content


def _replace_counted(api: APIClient, make_document: Any) -> tuple[Any, list[str]]:
    """The workshop document replaced under its revision, with the queries it made
    (the key's last use already recorded: once a minute)."""
    document = make_document("workshop", text="Node 22.")
    api.get(f"{DOCS}/workshop{ENV}")
    return counted(
        lambda: api.put(
            f"{DOCS}/workshop{ENV}",
            {"text": "Node 24."},
            format="json",
            HTTP_IF_MATCH=f'"{document.revision}"',
        )
    )


@pytest.mark.django_db(transaction=True)
def test_conditional_put_is_one_statement_after_the_key_on_postgresql(
    api: APIClient, keys: Keys, make_document: Any
) -> None:
    response, queries = _replace_counted(api, make_document)
    assert response.status_code == 200
    revision = response.json()["revision"]
    assert response.headers["ETag"] == f'"{revision}"'
    stored = Document.objects.get(doc_id="workshop")
    assert (stored.text, stored.revision) == ("Node 24.", revision)
    version = DocumentVersion.objects.get(document=stored, revision=revision)
    assert (version.action, version.text, version.created_at) == (
        "replace", "Node 24.", stored.updated_at
    )  # fmt: skip
    entry = AuditEntry.objects.get(action="document.replace")
    assert (entry.document_id, entry.revision, entry.detail) == ("workshop", revision, {"bytes": 8})
    assert entry.actor.startswith("key:mak_")
    # Key and resource, then one UPDATE ... RETURNING whose WITH clauses also write the
    # version, the audit entry and any webhook deliveries with their jobs: atomic by
    # itself, so no BEGIN and COMMIT. Other databases run a transaction: BEGIN, the
    # UPDATE, the two INSERTs, the deliveries' INSERT ... SELECT (none without
    # endpoints), COMMIT.
    assert len(queries) <= (2 if is_postgres() else 7), queries


@pytest.mark.django_db(transaction=True)
def test_a_stale_put_writes_nothing_within_the_budget(
    api: APIClient, keys: Keys, make_document: Any
) -> None:
    make_document("workshop", text="Node 22.")
    api.get(f"{DOCS}/workshop{ENV}")
    response, queries = counted(
        lambda: api.put(
            f"{DOCS}/workshop{ENV}", {"text": "x"}, format="json", HTTP_IF_MATCH='"stale"'
        )
    )
    assert response.status_code == 412
    assert Document.objects.get(doc_id="workshop").text == "Node 22."
    assert not AuditEntry.objects.filter(action="document.replace").exists()
    assert DocumentVersion.objects.count() == 1
    assert len(queries) <= 6, queries


@pytest.mark.django_db(transaction=True)
def test_a_delete_writes_its_audit_entry_with_any_deliveries_in_one_statement(
    api: APIClient, keys: Keys, make_document: Any
) -> None:
    document = make_document("workshop", text="Node 22.")
    api.get(f"{DOCS}/workshop{ENV}")
    response, queries = counted(
        lambda: api.delete(f"{DOCS}/workshop{ENV}", HTTP_IF_MATCH=f'"{document.revision}"')
    )
    assert response.status_code == 204
    assert Document.objects.get(doc_id="workshop").deleted
    entries = AuditEntry.objects.filter(action="document.delete", document_id="workshop")
    assert entries.count() == 1
    # The key and resource; BEGIN, the document, its versions' text, the audit entry, its
    # proposals' text (none here: nothing more), COMMIT. On PostgreSQL the entry carries
    # the webhook deliveries' clauses (or their guard) in its own statement; elsewhere the
    # endpoints are looked up after it.
    audited = [sql for sql in queries if "memory_auditentry" in sql]
    assert len(audited) == 1, queries
    assert len(queries) <= (7 if is_postgres() else 8), queries
    if is_postgres():
        assert "webhook" in audited[0] or "NOT EXISTS" in audited[0], audited


SESSIONS = "/api/managed-agents/sessions"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("bound", [1, 8])
def test_a_session_create_and_end_cost_the_same_whatever_documents_they_bind(
    api: APIClient, keys: Keys, project: Project, notes: Resource, bound: int
) -> None:
    memory = [
        {"id": f"r{i}", "description": "Resource.", "provider": {"kind": "document"}}
        for i in range(bound)
    ]
    deployment_create(
        project=project, agent="wide-bot", memory=memory, promote="development", actor="t"
    )
    for i in range(bound):
        resource = Resource.objects.get(resource_id=f"r{i}", environment="development")
        document_create(resource=resource, doc_id=f"d{i}", title="D", actor="t")
    api.get(f"{DOCS}/workshop{ENV}")
    body = {
        "agentId": "wide-bot@development",
        "memory": {
            f"r{i}": {"scope": "document", "id": f"d{i}", "access": "read-write"}
            for i in range(bound)
        },
    }
    response, queries = counted(
        lambda: api.post(SESSIONS, body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    )
    assert response.status_code == 201, response.content
    assert [m["writable"] for m in response.json()["session"]["memory"]] == [True] * bound
    session = Session.objects.get()
    assert session.bindings.count() == bound
    # The key, the project, the active deployment; BEGIN, the session (its key decides
    # between concurrent creates: no look-up first, no savepoint), the resources, every
    # bound document's state in one query, the bindings, the first event (numbered with
    # the session's row), the audit entry, COMMIT; then the answer's documents'
    # writability (its bindings are those just written, not read back) and the
    # deployment's environments. Elsewhere the audit entry's listeners are looked up
    # after it.
    assert len(queries) <= (13 if is_postgres() else 14), queries
    assert not [sql for sql in queries if "SAVEPOINT" in sql or "UPDATE" in sql], queries
    assert len([sql for sql in queries if "memory_document" in sql]) == 2, queries
    assert len([sql for sql in queries if "agents_binding" in sql]) == 1, queries  # the insert

    url = f"{SESSIONS}/{session.id}/end"
    response, queries = counted(lambda: api.post(url, {}, format="json"))
    assert response.status_code == 200, response.content
    assert [m["writable"] for m in response.json()["memory"]] == [False] * bound
    # The key, the session; BEGIN, its lock, the end, its event, the audit entry,
    # COMMIT; the answer's bindings (an ended session's are never writable: no
    # document is read for them).
    assert len(queries) <= (9 if is_postgres() else 10), queries
    assert not [sql for sql in queries if "SAVEPOINT" in sql], queries
    assert not [sql for sql in queries if "memory_document" in sql], queries


@pytest.mark.django_db(transaction=True)
def test_a_save_tool_call_reads_its_key_session_and_bindings_in_one_round_trip(
    api: APIClient, keys: Keys, session: Session, workshop: Document
) -> None:
    base = f"{SESSIONS}/{session.id}/memory"
    recalled = api.post(f"{base}/recall", {"use": ["notes"]}, format="json")
    assert recalled.status_code == 200, recalled.content
    body = {
        "recallId": recalled.json()["recallId"],
        "callId": "c1",
        "name": "memory_save",
        "arguments": {"text": "Node.js 24 now."},
    }
    response, queries = counted(lambda: api.post(f"{base}/tool-calls", body, format="json"))
    assert response.status_code == 200, response.content
    assert response.json()["result"]["status"] == "saved"
    assert Document.objects.get(pk=workshop.pk).text == "Node.js 24 now."
    # The key with the session, its deployment and its bindings with their resources
    # (on PostgreSQL one query, elsewhere the key first), the recall; BEGIN, the session's
    # lock, the save (its document read, then one statement with its version and audit
    # entry; elsewhere the inserts after the update), the event with the session's last
    # event number (one statement on PostgreSQL), COMMIT. The save is no savepoint of
    # the transaction.
    assert len(queries) <= (8 if is_postgres() else 15), queries
    if is_postgres():
        assert not [sql for sql in queries if "SAVEPOINT" in sql], queries
        (event,) = [sql for sql in queries if "agents_sessionevent" in sql]
        assert "last_seq" in event, event
        assert sum("memory_apikey" in sql for sql in queries) == 1, queries
        assert sum("agents_binding" in sql for sql in queries) == 1, queries


@pytest.mark.django_db(transaction=True)
def test_the_mcp_door_reads_its_session_and_bindings_once_a_call(
    session: Session, workshop: Document
) -> None:
    door = MemoryDoor(session_id=session.id, project_id=session.project_id)
    recalled, queries = counted(door.recall_now)
    assert set(recalled["memory"]) == {"kb", "notes"}
    # The session with its deployment, bindings and bound documents; the collection's
    # overview; the recall with its sources (elsewhere two inserts in a transaction).
    assert len(queries) <= (3 if is_postgres() else 6), queries
    saved, queries = counted(lambda: door.call("memory_save", {"text": "Node 24."}))
    assert saved["status"] == "saved"
    assert Document.objects.get(pk=workshop.pk).text == "Node 24."
    # As the API's tool call, with the session and bindings read without the key.
    assert len(queries) <= (8 if is_postgres() else 14), queries
    assert sum("agents_binding" in sql for sql in queries) == 1, queries


@pytest.mark.django_db(transaction=True)
def test_a_recall_costs_one_query_per_step_and_stores_its_sources_with_it(
    api: APIClient, keys: Keys, session: Session, workshop: Document, make_document: Any
) -> None:
    kb = Resource.objects.get(resource_id="kb", environment="development")
    make_document("refunds", resource=kb, title="Refunds", text="30 days.")
    url = f"/api/managed-agents/sessions/{session.id}/memory/recall"
    api.get(f"{DOCS}/workshop{ENV}")
    response, queries = counted(lambda: api.post(url, {}, format="json"))
    assert response.status_code == 200, response.content
    recall_id = response.json()["recallId"]
    stored = RecallSource.objects.filter(recall_id=recall_id)
    assert sorted(stored.values_list("doc_id", "revision")) == sorted(
        [
            ("workshop", workshop.revision),
            ("refunds", Document.objects.get(doc_id="refunds").revision),
        ]
    )
    # The key with the session, its deployment, its bindings with their resources and
    # the bound documents (on PostgreSQL one query, elsewhere the key first), the
    # collection's overview page, then the recall: its row and its sources in one
    # statement on PostgreSQL, elsewhere two in a transaction (BEGIN, COMMIT).
    assert len(queries) <= (3 if is_postgres() else 7), queries
    if is_postgres():
        # Committed durably before the answer, as every write is: an incident's trace
        # rests on it (docs/decisions.md). No setting relaxes its commit.
        (store,) = [sql for sql in queries if "INSERT" in sql]
        assert "synchronous_commit" not in store
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            assert cursor.fetchone() == ("on",)


@pytest.mark.django_db(transaction=True)
def test_a_recall_under_a_request_id_adds_only_the_look_up_of_an_accepted_one(
    api: APIClient, keys: Keys, session: Session, workshop: Document
) -> None:
    url = f"/api/managed-agents/sessions/{session.id}/memory/recall"
    api.get(f"{DOCS}/workshop{ENV}")
    plain, plain_queries = counted(lambda: api.post(url, {}, format="json"))
    body = {"requestId": "mreq-1"}
    response, queries = counted(lambda: api.post(url, body, format="json"))
    assert response.status_code == 200, response.content
    recall = Recall.objects.get(request_id="mreq-1")
    assert response.json()["recallId"] == recall.id
    assert list(recall.sources.values_list("doc_id", "revision")) == [
        ("workshop", workshop.revision)
    ]
    # What a plain recall makes, and whether this request was accepted before: its
    # store needs no transaction on PostgreSQL (one statement, atomic by itself; a
    # concurrent retry's collision is an IntegrityError it recovers from).
    assert plain.status_code == 200
    assert len(queries) == len(plain_queries) + 1, queries
    if is_postgres():
        assert not [q for q in queries if q.split()[0] in ("BEGIN", "COMMIT", "SAVEPOINT")]
    # A retry reads the accepted recall and stores nothing.
    again, retry_queries = counted(lambda: api.post(url, body, format="json"))
    assert again.json() == response.json()
    assert not [q for q in retry_queries if "INSERT" in q]
    assert len(retry_queries) <= len(queries) - 1, retry_queries
    assert Recall.objects.filter(request_id="mreq-1").count() == 1


def test_memory_page_document_list_reads_the_role_once(
    owner: Any, make_document: Any, notes: Any
) -> None:
    for index in range(3):
        make_document(f"doc-{index}", text="x" * 10)
    url = reverse("web:documents", args=["acme", "development", "notes"])
    response, queries = counted(lambda: owner.get(url))
    html = html_of(response)
    for index in range(3):
        href = reverse("web:document", args=["acme", "development", "notes", f"doc-{index}"])
        assert f'<a href="{href}"' in html
    assert "10 B<" in html
    roles = [q for q in queries if "memory_projectrole" in q or "web_projectrole" in q]
    assert len(roles) == 1, queries
    # The session; the user with the roles (the project switcher), the resource the
    # URL names and the project's agents (the agent filter's choices); one keyset
    # page. The total loads after the page (its COUNT grows with the resource).
    assert len(queries) <= 3, queries
    assert "memory_deployment" in roles[0], queries
    assert '<option value="support-bot">support-bot</option>' in html
    assert not any("COUNT(" in q.upper() for q in queries), queries
    # Once this instance has read the session, the user and all the rest come in the
    # session's own query: two round trips with the keyset page.
    response, queries = counted(lambda: owner.get(url))
    assert response.status_code == 200
    again = html_of(response)
    for index in range(3):
        href = reverse("web:document", args=["acme", "development", "notes", f"doc-{index}"])
        assert f'<a href="{href}"' in again
    assert len(queries) == 2, queries
    assert "django_session" in queries[0], queries
    assert "memory_deployment" in queries[0], queries
    total_url = url + "total/"
    assert f'hx-get="{total_url}" hx-trigger="load, ' in html
    response, queries = counted(lambda: owner.get(total_url, HTTP_HX_REQUEST="true"))
    assert html_of(response) == "3 documents"
    assert sum("COUNT(" in q.upper() for q in queries) == 1, queries
    # With the filter: what it keeps and what the resource holds, a COUNT each.
    response, queries = counted(
        lambda: owner.get(total_url, {"q": "doc-1"}, HTTP_HX_REQUEST="true")
    )
    assert html_of(response) == "1 of 3 documents"
    assert sum("COUNT(" in q.upper() for q in queries) == 2, queries
    # The same fragment for htmx filters, without the page around it.
    response, queries = counted(lambda: owner.get(url, {"q": "doc-1"}, HTTP_HX_REQUEST="true"))
    html = html_of(response)
    assert "doc-1" in html
    assert "doc-2" not in html
    assert "<html" not in html
    assert not any("COUNT(" in q.upper() for q in queries), queries
    assert len(queries) <= 3, queries


@pytest.mark.postgres
def test_the_document_filter_has_trigram_indexes_on_postgresql(db: None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memory_document'"
        )
        indexes = dict(cursor.fetchall())
    assert "gin_trgm_ops" in indexes["document_title_trgm"]
    # New entries go into the index at once: a pending list would be scanned by
    # every filter or search until vacuum merged it (migrations 0009 and 0010).
    gin = ("document_title_trgm", "document_id_trgm", "memory_document_search")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, reloptions FROM pg_class WHERE relname = ANY(%s)", [list(gin)]
        )
        options = dict(cursor.fetchall())
    assert options == {name: ["fastupdate=off"] for name in gin}, options
    assert "upper((title)::text)" in indexes["document_title_trgm"]
    assert "upper((doc_id)::text)" in indexes["document_id_trgm"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not is_postgres(), reason="the one-statement write of PostgreSQL")
def test_a_put_heard_by_a_webhook_writes_its_delivery_and_job_in_its_statement(
    api: APIClient, keys: Keys, make_document: Any
) -> None:
    from memoryadmin.runner.models import Job
    from memoryadmin.webhooks.models import Delivery

    hook = api.post(
        "/api/managed-agents/projects/acme/webhooks",
        {"url": "http://127.0.0.1:9/hooks", "events": ["document.updated"]},
        format="json",
    )
    assert hook.status_code == 201
    response, queries = _replace_counted(api, make_document)
    assert response.status_code == 200
    delivery = Delivery.objects.get(event="document.updated")
    assert delivery.endpoint_id == hook.json()["id"]
    job = Job.objects.get(kwargs__endpoint=hook.json()["id"])
    assert delivery.job_id == job.pk
    # The job was handed to the task backend after the statement committed.
    assert job.dispatched_at is not None
    writes = [sql for sql in queries if sql.startswith(("WITH", "BEGIN", "COMMIT"))]
    assert len(writes) == 1, queries
    assert "webhooks_delivery" in writes[0]
    assert "runner_job" in writes[0]


def test_a_recall_read_with_its_key_still_refuses_every_key_it_refused(
    client_for: Any, keys: Keys, session: Session, workshop: Document
) -> None:
    from memoryadmin.memory.models import ApiKey
    from memoryadmin.memory.services.keys import api_key_revoke

    url = f"/api/managed-agents/sessions/{session.id}/memory/recall"
    owner = client_for(keys.owner)
    assert owner.post(url, {}, format="json").status_code == 200
    unknown = owner.post("/api/managed-agents/sessions/ses_nope/memory/recall", {}, format="json")
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "not_found")
    other = client_for(keys.other).post(url, {}, format="json")
    assert (other.status_code, other.json()["error"]["code"]) == (404, "not_found")
    assert client_for(keys.read_only).post(url, {}, format="json").status_code == 403
    assert client_for("mak_not-a-key").post(url, {}, format="json").status_code == 401
    assert client_for("nonsense").post(url, {}, format="json").status_code == 401
    api_key_revoke(key=ApiKey.objects.get(prefix=keys.owner[:12]), actor="test")
    assert owner.post(url, {}, format="json").status_code == 401


@pytest.mark.django_db(transaction=True)
def test_an_external_recall_maps_the_records_it_shows_in_one_statement(
    api: APIClient, keys: Keys, project: Any, mem0_oss: Any
) -> None:
    """What a recall writes besides itself: the id mapping of the provider records it shows
    (so the model's ids resolve), one query for those already mapped and one INSERT for the
    rest however many there are, no savepoints; a recall of mapped records writes nothing."""
    from memoryadmin.external.models import ExternalRecord
    from tests.helpers import deploy_external, external_session

    deploy_external(
        project,
        {
            "kind": "mem0-oss",
            "baseUrl": mem0_oss.origin,
            "headers": {"X-API-Key": {"secret": "MEM0_KEY"}},
        },
        secrets_by_origin={mem0_oss.origin: {"MEM0_KEY": "mem0-test-key"}},
    )
    session = external_session(project, "alice")
    url = f"/api/managed-agents/sessions/{session.id}/memory/recall"
    mem0_oss.seed("Fact 0.", user_id="alice")
    assert api.post(url, {"use": ["mem"]}, format="json").status_code == 200
    for index in range(1, 21):
        mem0_oss.seed(f"Fact {index}.", user_id="alice")
    response, queries = counted(lambda: api.post(url, {"use": ["mem"]}, format="json"))
    assert response.status_code == 200, response.content
    assert len(response.json()["memory"]["mem"]["sources"]) == 21
    assert ExternalRecord.objects.filter(namespace="alice").count() == 21
    mapping = [sql for sql in queries if "external_externalrecord" in sql]
    assert [sql.split()[0] for sql in mapping] == ["SELECT", "INSERT"], mapping
    assert not [sql for sql in queries if "SAVEPOINT" in sql], queries

    response, queries = counted(lambda: api.post(url, {"use": ["mem"]}, format="json"))
    assert response.status_code == 200, response.content
    mapping = [sql for sql in queries if "external_externalrecord" in sql]
    assert [sql.split()[0] for sql in mapping] == ["SELECT"], mapping
    assert ExternalRecord.objects.filter(namespace="alice").count() == 21
