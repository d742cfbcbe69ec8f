"""One recall's providers called concurrently within one deadline; a cap per project.

The provider below is a real HTTP server on 127.0.0.1 that holds every request
until the test lets it answer, so the tests prove what happens while calls are
open (which calls arrived together, who is refused, who is still served)
without measuring time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import httpx
import pytest
from django.core.servers.basehttp import ThreadedWSGIServer
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings
from pytest_django.live_server_helper import LiveServer
from rest_framework.test import APIClient

from memoryadmin.agents.errors import RecallBusy, RecallFailed
from memoryadmin.agents.models import Recall, Session
from memoryadmin.agents.services.runtime import recall_create
from memoryadmin.agents.services.sessions import session_create
from memoryadmin.core.concurrency import Deadline, ProviderCalls, in_flight, requests_waiting
from memoryadmin.memory.models import AuditEntry, Document, Project
from memoryadmin.memory.services.deployments import deployment_create, resource_get
from memoryadmin.memory.services.documents import document_create
from memoryadmin.memory.services.keys import api_key_create
from tests.helpers import HeldProvider, held_provider

pytestmark = pytest.mark.django_db(transaction=True)

SESSIONS = "/api/managed-agents/sessions"
# No keep-alive: an idle kept-alive connection would hold a server worker.
CLOSE = {"Connection": "close"}
WAIT = 30.0


@pytest.fixture
def provider() -> Iterator[HeldProvider]:
    with held_provider() as server:
        yield server


def _eventually(condition: Callable[[], bool]) -> bool:
    """Whether `condition` holds within WAIT seconds (checked every 10 ms)."""
    stop = threading.Event()
    for _ in range(int(WAIT * 100)):
        if condition():
            return True
        stop.wait(0.01)
    return condition()


def http_resource(resource_id: str, origin: str) -> dict[str, Any]:
    return {
        "id": resource_id,
        "description": "Facts.",
        "provider": {
            "kind": "http",
            "connection": {
                "id": "held",
                "origin": origin,
                "methods": ["POST"],
                "pathPrefix": "/",
            },
            "path": "/memory",
            "maxBytes": 1024,
        },
    }


def session_on(project: Project, memory: list[dict[str, Any]], bindings: dict[str, Any]) -> Session:
    deployment_create(
        project=project, agent="researcher", memory=memory, promote="development", actor="t"
    )
    session, _ = session_create(
        project=project,
        agent_id="researcher@development",
        memory=bindings,
        idempotency_key="k",
        actor="t",
    )
    return session


def namespaces(count: int, origin: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    ids = [f"facts-{i}" for i in range(count)]
    memory = [http_resource(resource_id, origin) for resource_id in ids]
    return memory, {resource_id: {"scope": "namespace", "id": "owner"} for resource_id in ids}


# One recall, many providers.


@override_settings(MEMORYADMIN_PROVIDER_DEADLINE_SECONDS=5.0)
def test_eight_slow_bindings_are_called_together(project: Project) -> None:
    # The provider answers none of them until all eight are open at once: a
    # recall calling them one after another would time out on the first.
    with held_provider(release_after=8) as provider:
        memory, bindings = namespaces(8, provider.origin)
        session = session_on(project, memory, bindings)
        body = recall_create(session=session, use=[], input_text="hosting")
    assert provider.most_open == 8
    assert list(body["memory"]) == [f"facts-{i}" for i in range(8)]
    for resource_id, projection in body["memory"].items():
        assert projection["text"] == f"{body['recallId']}:{resource_id}"
    # One deadline for the whole recall, sent to every provider.
    assert len({b["deadlineAt"] for b in provider.bodies}) == 1
    assert len({b["operationId"] for b in provider.bodies}) == 8
    assert Recall.objects.get(pk=body["recallId"]).memory == body["memory"]


@override_settings(MEMORYADMIN_PROVIDER_DEADLINE_SECONDS=2.0)
def test_one_deadline_bounds_the_whole_recall(project: Project, provider: HeldProvider) -> None:
    memory, bindings = namespaces(8, provider.origin)
    session = session_on(project, memory, bindings)
    with pytest.raises(RecallFailed) as raised:
        recall_create(session=session, use=[], input_text=None)
    # The caller sees a generic failure; why it failed is in the audit log.
    assert raised.value.reason == "provider_failed"
    assert _audited_reasons() == ["timeout"]
    # Every provider was asked once, within the same deadline: called one
    # after another, the later ones would have found it passed, unsent.
    assert provider.wait_for(8)
    assert len(provider.bodies) == 8
    assert len({b["deadlineAt"] for b in provider.bodies}) == 1
    assert not Recall.objects.exists()
    # The calls still open when the recall failed end at the same deadline.
    assert _eventually(lambda: in_flight(project.id) == 0)


def test_a_failing_provider_fails_the_recall_without_waiting_for_the_others(
    project: Project, provider: HeldProvider
) -> None:
    with held_provider() as failing:
        failing.status = 401
        # The failure comes only once the other call is open at its provider.
        failing.release = provider.arrival
        memory = [http_resource("fails", failing.origin), http_resource("holds", provider.origin)]
        bindings = {
            "fails": {"scope": "namespace", "id": "o"},
            "holds": {"scope": "namespace", "id": "o"},
        }
        session = session_on(project, memory, bindings)
        assert provider.release.is_set() is False
        with pytest.raises(RecallFailed) as raised:
            recall_create(session=session, use=[], input_text=None)
    assert (raised.value.resource, raised.value.reason) == ("fails", "provider_failed")
    assert _audited_reasons() == ["http_error"]
    # The held call is abandoned, not awaited: the recall's slots stay taken until it ends.
    assert provider.wait_for(1)
    assert in_flight(project.id) == 2
    provider.release.set()
    assert _eventually(lambda: in_flight(project.id) == 0)
    assert not Recall.objects.exists()


@override_settings(MEMORYADMIN_PROVIDER_REQUESTS_PER_PROJECT=1)
def test_a_call_no_thread_can_be_started_for_gives_the_recalls_slots_back(
    project: Project, provider: HeldProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process cannot start a thread for a recall's second call (its thread limit):
    the recall fails, its first call still reaches the provider, and once that call ends
    the project's slots are all free again; kept, they would lock the project out (with
    one request a project, at once)."""
    provider.release.set()
    memory, bindings = namespaces(2, provider.origin)
    session = session_on(project, memory, bindings)
    submit = ThreadPoolExecutor.submit
    submitted: list[int] = []

    def failing_second(pool: ThreadPoolExecutor, *args: Any, **kwargs: Any) -> Future[Any]:
        submitted.append(1)
        if len(submitted) == 2:
            raise RuntimeError("can't start new thread")
        return submit(pool, *args, **kwargs)

    monkeypatch.setattr(ThreadPoolExecutor, "submit", failing_second)
    with pytest.raises(RecallBusy) as refused:  # a 429 to retry, not a 500
        recall_create(session=session, use=[], input_text=None)
    assert (refused.value.status, refused.value.retry_after) == (429, 1)
    assert refused.value.details["resource"] == "facts-0"
    assert provider.wait_for(1)
    assert _eventually(lambda: in_flight(project.id) == 0 and requests_waiting(project.id) == 0)
    monkeypatch.setattr(ThreadPoolExecutor, "submit", submit)
    body = recall_create(session=session, use=[], input_text=None)
    assert list(body["memory"]) == ["facts-0", "facts-1"]
    assert in_flight(project.id) == 0


@override_settings(MEMORYADMIN_PROVIDER_CONCURRENCY_PER_PROJECT=2)
def test_more_bindings_than_the_cap_run_in_turns(project: Project) -> None:
    with held_provider(release_after=2) as provider:
        memory, bindings = namespaces(5, provider.origin)
        session = session_on(project, memory, bindings)
        body = recall_create(session=session, use=[], input_text=None)
    assert len(body["memory"]) == 5
    assert len(provider.bodies) == 5
    assert provider.most_open == 2
    assert in_flight(project.id) == 0


def test_document_bindings_are_read_in_one_query(project: Project) -> None:
    memory = [
        {"id": f"doc-{i}", "description": "D.", "provider": {"kind": "document"}} for i in range(3)
    ]
    deployment_create(
        project=project, agent="researcher", memory=memory, promote="development", actor="t"
    )
    for i, doc_id in enumerate("abc"):
        resource = resource_get(project=project, environment="development", resource_id=f"doc-{i}")
        document_create(
            resource=resource, doc_id=doc_id, title=doc_id, text=f"{i}{doc_id}", actor="t"
        )
    session, _ = session_create(
        project=project,
        agent_id="researcher@development",
        memory={f"doc-{i}": {"scope": "document", "id": d} for i, d in enumerate("abc")},
        idempotency_key="docs",
        actor="t",
    )
    with CaptureQueriesContext(connection) as queries:
        body = recall_create(session=session, use=[], input_text=None)
    texts = {resource_id: p["text"] for resource_id, p in body["memory"].items()}
    assert texts == {"doc-0": "0a", "doc-1": "1b", "doc-2": "2c"}
    assert body["memory"]["doc-0"]["sources"][0]["id"] == "a"
    table = Document._meta.db_table
    reads = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT")]
    assert len([sql for sql in reads if f'FROM "{table}"' in sql]) == 1


# The cap per project, through a server with a fixed number of workers.

WORKERS = 4
CAP = 2


class BoundedWSGIServer(ThreadedWSGIServer):
    """A server with WORKERS worker threads, like a production server's: a
    request that finds every worker busy waits in line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.workers = ThreadPoolExecutor(WORKERS, thread_name_prefix="worker")

    def process_request(self, request: Any, client_address: Any) -> None:
        self.workers.submit(self.process_request_thread, request, client_address)

    def server_close(self) -> None:
        super().server_close()
        self.workers.shutdown(wait=False, cancel_futures=True)


@pytest.fixture
def bounded_server(transactional_db: None) -> Iterator[str]:
    server = LiveServer("127.0.0.1", start=False)
    server.thread.server_class = BoundedWSGIServer
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def _client(base: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=base, headers={"x-api-key": key, **CLOSE}, timeout=WAIT)


# Truly simultaneous requests need a connection per thread: the live server
# shares SQLite's in-memory test database through one connection, whose cached
# statements concurrent threads would reset under each other.
@pytest.mark.postgres
@override_settings(
    MEMORYADMIN_PROVIDER_CONCURRENCY_PER_PROJECT=CAP, MEMORYADMIN_PROVIDER_DEADLINE_SECONDS=WAIT
)
def test_a_slow_provider_in_one_project_leaves_the_others_served(
    bounded_server: str, project: Project, other_project: Project, provider: HeldProvider
) -> None:
    memory, bindings = namespaces(1, provider.origin)
    session = session_on(project, memory, bindings)
    deployment_create(
        project=other_project,
        agent="writer",
        memory=[{"id": "notes", "description": "N.", "provider": {"kind": "document"}}],
        promote="development",
        actor="t",
    )
    notes = resource_get(project=other_project, environment="development", resource_id="notes")
    document_create(resource=notes, doc_id="plan", title="Plan", text="Ship it.", actor="t")
    a_key = api_key_create(project_id=project.id)[1]
    b_key = api_key_create(project_id=other_project.id)[1]

    def recall_a(_: int) -> httpx.Response:
        with _client(bounded_server, a_key) as client:
            return client.post(f"{SESSIONS}/{session.id}/memory/recall", json={"use": []})

    recalls = ThreadPoolExecutor(WORKERS + 2)
    try:
        futures = [recalls.submit(recall_a, i) for i in range(WORKERS + 2)]
        # CAP calls reach the provider and are held there; the rest are
        # refused at once, while those calls are still open.
        assert provider.wait_for(CAP)
        refused = _first(futures, len(futures) - CAP)
        held = [f for f in futures if f not in refused]
        for future in refused:
            response = future.result()
            assert response.status_code == 429, response.text
            error = response.json()["error"]
            assert error["code"] == "recall_failed"
            assert error["details"]["reason"] == "concurrency_limit"
            assert error["details"]["resource"] == "facts-0"
            assert 1 <= int(response.headers["Retry-After"]) <= WAIT
            assert error["details"]["retryAfter"] == int(response.headers["Retry-After"])
        assert len(provider.bodies) == CAP
        # Project B reads its documents while A's calls are still held open.
        with _client(bounded_server, b_key) as b:
            for _ in range(WORKERS * 2):
                read = b.get(
                    "/api/managed-agents/projects/globex/memory/notes/documents/plan",
                    params={"environment": "development"},
                )
                assert read.status_code == 200, read.text
                assert read.json()["text"] == "Ship it."
        assert not any(f.done() for f in held)
        assert in_flight(project.id) == CAP
        provider.release.set()
        for future in held:
            response = future.result(timeout=WAIT)
            assert response.status_code == 200, response.text
            assert response.json()["memory"]["facts-0"]["writable"] is False
    finally:
        provider.release.set()
        recalls.shutdown(wait=True)
    assert Recall.objects.filter(session=session).count() == CAP
    assert in_flight(project.id) == 0


def _first(futures: list[Future[Any]], count: int) -> set[Future[Any]]:
    """The first `count` futures to finish; fails when they do not within WAIT seconds."""
    finished: set[Future[Any]] = set()
    pending = set(futures)
    while len(finished) < count:
        done, pending = wait(pending, timeout=WAIT, return_when=FIRST_COMPLETED)
        assert done, f"only {len(finished)} of {count} answered"
        finished |= done
    assert len(finished) == count, "a held call was answered before its release"
    return finished


@override_settings(MEMORYADMIN_PROVIDER_CONCURRENCY_PER_PROJECT=1)
def test_a_tool_call_beyond_the_cap_is_429_and_never_sent(
    project: Project, provider: HeldProvider
) -> None:
    provider.release.set()
    declaration = http_resource("facts", provider.origin)
    declaration["provider"]["tools"] = [
        {
            "name": "note",
            "description": "Write.",
            "access": "write",
            "input": {"type": "object", "properties": {"q": {"type": "string"}}},
        }
    ]
    session = session_on(
        project, [declaration], {"facts": {"scope": "namespace", "id": "o", "access": "read-write"}}
    )
    api = APIClient()
    api.credentials(HTTP_X_API_KEY=api_key_create(project_id=project.id)[1])
    recalled = api.post(f"{SESSIONS}/{session.id}/memory/recall", {"use": ["facts"]}, format="json")
    assert recalled.status_code == 200, recalled.json()
    assert len(provider.bodies) == 1
    call = {
        "recallId": recalled.json()["recallId"],
        "callId": "call_1",
        "name": "memory_note",
        "arguments": {"q": "x"},
    }
    # Another call of the project holds its only slot.
    with ProviderCalls[None](project_id=project.id, count=1, deadline=Deadline.after(WAIT)):
        response = api.post(f"{SESSIONS}/{session.id}/memory/tool-calls", call, format="json")
        assert response.status_code == 429
        error = response.json()["error"]
        assert error["code"] == "provider_failed"
        assert error["details"] == {
            "reason": "concurrency_limit",
            "retryAfter": int(response["Retry-After"]),
        }
        assert 1 <= int(response["Retry-After"]) <= WAIT
        again = api.post(f"{SESSIONS}/{session.id}/memory/recall", {"use": []}, format="json")
        assert again.status_code == 429
        assert again.json()["error"]["code"] == "recall_failed"
    # Nothing was sent: a write refused at the cap is safe to retry.
    assert len(provider.bodies) == 1
    assert Recall.objects.count() == 1
    assert in_flight(project.id) == 0
    retried = api.post(f"{SESSIONS}/{session.id}/memory/tool-calls", call, format="json")
    assert retried.status_code == 200
    assert provider.bodies[-1]["operation"] == "tool"


def _audited_reasons() -> list[str]:
    """The reasons of the provider failures written to the audit log, for the owners."""
    entries = AuditEntry.objects.filter(action="provider.failed").order_by("id")
    return [entry.detail["reason"] for entry in entries]
