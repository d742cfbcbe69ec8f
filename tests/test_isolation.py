"""No project can stall another: one project's key, hostile but authorised, against
the production server (gunicorn with gunicorn.conf.py and its shipped thread and
worker counts, PostgreSQL) and the background worker.

Every server here is real and on 127.0.0.1: gunicorn as a subprocess, providers
and webhook receivers as threads of this process that hold or drip their answers.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings as django_settings
from django.db import connections
from rest_framework.test import APIClient

from memoryadmin.agents.services.records import record_list
from memoryadmin.agents.services.sessions import session_create
from memoryadmin.core.errors import ProviderBusy
from memoryadmin.memory.models import Project
from memoryadmin.memory.services.deployments import deployment_create, resource_get
from memoryadmin.memory.services.documents import document_create
from memoryadmin.memory.services.keys import api_key_create
from memoryadmin.webhooks.models import Delivery, DeliveryState
from memoryadmin.webhooks.services import endpoint_create
from tests.fake_providers import FakeMem0Oss, running
from tests.helpers import (
    Receiver,
    ScriptedProvider,
    clean_env,
    deploy_external,
    gunicorn,
    held_provider,
    serve,
    suite_database_url,
    worker,
)
from tests.loopback import LoopbackServer

SESSIONS = "/api/managed-agents/sessions"
# gunicorn.conf.py's defaults: two workers of four threads.
WORKERS, THREADS = 2, 4


def production_server_env() -> dict[str, str]:
    """The production server's settings (debug off) on the suite's database, with
    loopback providers allowed; thread and worker counts are gunicorn.conf.py's."""
    return clean_env(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DJANGO_SECRET_KEY=django_settings.SECRET_KEY,
        DATABASE_URL=suite_database_url(),
    )


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_project_saturating_its_slow_provider_leaves_another_projects_reads_fast(
    project: Project, other_project: Project
) -> None:
    """24 recalls of project A wait on a provider that does not answer; project B's
    document reads meanwhile stay under 1 s at the 95th percentile, and A's requests
    past its share of the threads are refused at once with 429 and Retry-After."""
    with held_provider() as provider:
        declaration = {
            "id": "facts",
            "description": "Facts.",
            "provider": {
                "kind": "http",
                "connection": {
                    "id": "held",
                    "origin": provider.origin,
                    "methods": ["POST"],
                    "pathPrefix": "/",
                },
                "path": "/memory",
            },
        }
        deployment_create(
            project=project,
            agent="researcher",
            memory=[declaration],
            promote="development",
            actor="t",
        )
        session, _ = session_create(
            project=project,
            agent_id="researcher@development",
            memory={"facts": {"scope": "namespace", "id": "owner"}},
            idempotency_key="k",
            actor="t",
        )
        notes = {"id": "notes", "description": "N.", "provider": {"kind": "document"}}
        deployment_create(
            project=other_project, agent="writer", memory=[notes], promote="development", actor="t"
        )
        resource = resource_get(
            project=other_project, environment="development", resource_id="notes"
        )
        document_create(resource=resource, doc_id="plan", title="Plan", text="Ship.", actor="t")
        a_key = api_key_create(project_id=project.id)[1]
        b_key = api_key_create(project_id=other_project.id)[1]

        with gunicorn(production_server_env(), workers=WORKERS, threads=THREADS) as base:

            def recall_a(_: int) -> httpx.Response:
                with httpx.Client(base_url=base, timeout=60) as client:
                    return client.post(
                        f"{SESSIONS}/{session.id}/memory/recall",
                        json={"use": []},
                        headers={"x-api-key": a_key},
                    )

            storm = ThreadPoolExecutor(24)
            try:
                recalls = [storm.submit(recall_a, i) for i in range(24)]
                # A holds what it may of the server's threads. A connection lands on
                # whichever worker accepts it first, which refuses past its share while
                # the other may have taken none: more recalls come until every worker
                # holds its share.
                share = WORKERS * (THREADS // 2)
                for wave in range(10):
                    if provider.wait_for(share, timeout=2):
                        break
                    recalls += [storm.submit(recall_a, wave) for _ in range(8)]
                assert provider.wait_for(share)
                timings = []
                with httpx.Client(base_url=base, timeout=60) as b:
                    for _ in range(20):
                        started = time.monotonic()
                        read = b.get(
                            "/api/managed-agents/projects/globex/memory/notes/documents/plan",
                            params={"environment": "development"},
                            headers={"x-api-key": b_key},
                        )
                        timings.append(time.monotonic() - started)
                        assert read.status_code == 200, read.text
                        assert read.json()["text"] == "Ship."
                assert p95(timings) < 1.0, timings
                # A's requests past its share were refused without waiting.
                refused = [f.result() for f in recalls if f.done()]
                assert refused, "no recall of A was refused while its share was held"
                for response in refused:
                    assert response.status_code == 429, response.text
                    error = response.json()["error"]
                    assert error["code"] == "recall_failed"
                    assert error["details"]["reason"] == "concurrency_limit"
                    assert int(response.headers["Retry-After"]) >= 1
                # Never more of A waited on its provider than its share of the threads.
                assert len(provider.bodies) <= WORKERS * (THREADS // 2)
            finally:
                provider.release.set()
                storm.shutdown(wait=True)
            answered = [f.result() for f in recalls]
            assert {r.status_code for r in answered} <= {200, 429}
            assert sum(r.status_code == 200 for r in answered) == len(provider.bodies)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_project_saturating_its_slow_provider_leaves_another_projects_recalls_fast(
    project: Project, other_project: Project, scripted: ScriptedProvider
) -> None:
    """Project A's recalls wait on a provider that does not answer, as many as its share
    of every worker's threads; project B's recalls through its own provider meanwhile are
    all served (no 429, no wait on A's calls), within a second."""
    b_provider = scripted
    with held_provider() as held:
        b_provider.recall = [(200, {"text": "B's facts.", "sources": []})]
        deployment_create(
            project=project,
            agent="researcher",
            memory=[held_declaration(held.origin)],
            promote="development",
            actor="t",
        )
        a_session, _ = session_create(
            project=project,
            agent_id="researcher@development",
            memory={"facts": {"scope": "namespace", "id": "owner"}},
            idempotency_key="k",
            actor="t",
        )
        deployment_create(
            project=other_project,
            agent="scribe",
            memory=[b_provider.declaration([])],
            promote="development",
            actor="t",
        )
        b_session, _ = session_create(
            project=other_project,
            agent_id="scribe@development",
            memory={"ledger": {"scope": "namespace", "id": "team"}},
            idempotency_key="k",
            actor="t",
        )
        a_key = api_key_create(project_id=project.id)[1]
        b_key = api_key_create(project_id=other_project.id)[1]

        with gunicorn(production_server_env(), workers=WORKERS, threads=THREADS) as base:

            def recall_a(_: int) -> httpx.Response:
                with httpx.Client(base_url=base, timeout=60) as client:
                    return client.post(
                        f"{SESSIONS}/{a_session.id}/memory/recall",
                        json={"use": []},
                        headers={"x-api-key": a_key},
                    )

            storm = ThreadPoolExecutor(24)
            try:
                recalls = [storm.submit(recall_a, i) for i in range(24)]
                share = WORKERS * (THREADS // 2)
                for wave in range(10):
                    if held.wait_for(share, timeout=2):
                        break
                    recalls += [storm.submit(recall_a, wave) for _ in range(8)]
                assert held.wait_for(share)
                timings = []
                with httpx.Client(base_url=base, timeout=60) as b:
                    for _ in range(20):
                        started = time.monotonic()
                        recalled = b.post(
                            f"{SESSIONS}/{b_session.id}/memory/recall",
                            json={"use": ["ledger"]},
                            headers={"x-api-key": b_key, "Connection": "close"},
                        )
                        timings.append(time.monotonic() - started)
                        assert recalled.status_code == 200, recalled.text
                        assert recalled.json()["memory"]["ledger"]["text"] == "B's facts."
                # As the GETs' above: a wait on A's calls would be their deadline or a 429.
                assert p95(timings) < 1.0, timings
                assert len(b_provider.requests("recall")) == 20
                # A still waits on its provider: B was served meanwhile, not after.
                assert not all(f.done() for f in recalls)
            finally:
                held.release.set()
                storm.shutdown(wait=True)
            assert {f.result().status_code for f in recalls} <= {200, 429}


def held_declaration(origin: str) -> dict[str, Any]:
    """Resource `facts` on the http provider at `origin`."""
    return {
        "id": "facts",
        "description": "Facts.",
        "provider": {
            "kind": "http",
            "connection": {"id": "held", "origin": origin, "methods": ["POST"], "pathPrefix": "/"},
            "path": "/memory",
        },
    }


# Background jobs: a worker process runs webhook deliveries of every project.


class DripReceiver(LoopbackServer):
    """A webhook receiver that reads the delivery, then sends its answer one byte every
    `pause` seconds (`drip`) or streams `flood` bytes of body as fast as it can."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, *, drip: bool = False, flood: int = 0, pause: float = 1.0) -> None:
        super().__init__(("127.0.0.1", 0), _DripHandler)
        self.drip, self.flood, self.pause = drip, flood, pause
        self.lock = threading.Lock()
        # Per event id: the connections open now, the most open at once.
        self.open: dict[str, int] = {}
        self.most_open = 0
        # How long each attempt stayed open before the sender closed it.
        self.held: list[float] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hooks"


class _DripHandler(BaseHTTPRequestHandler):
    server: DripReceiver
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        event = self.headers["Memoryadmin-Event-Id"]
        started = time.monotonic()
        with self.server.lock:
            self.server.open[event] = self.server.open.get(event, 0) + 1
            self.server.most_open = max(self.server.most_open, self.server.open[event])
        try:
            if self.server.drip:
                answer = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n" + b"X-Slow: " + b"x" * 200
                for byte in answer:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    if self._closed_within(self.server.pause):
                        break
            else:
                head = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                self.wfile.write(head + f"Content-Length: {self.server.flood}\r\n\r\n".encode())
                chunk = b"\0" * (1 << 20)
                for _ in range(self.server.flood // len(chunk)):
                    self.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with self.server.lock:
                self.server.open[event] -= 1
                self.server.held.append(time.monotonic() - started)
            self.close_connection = True

    def _closed_within(self, seconds: float) -> bool:
        """Whether the sender closes the connection within `seconds` (it sends nothing
        after its request, so the socket turns readable only when it closes). A write
        would see the close only a second or two later: the first one after a plain
        close still succeeds, and the drip writes once a `pause`."""
        readable, _, _ = select.select([self.connection], [], [], seconds)
        if not readable:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:  # reset
            return True

    def log_message(self, format: str, *args: Any) -> None:
        pass


def worker_env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": suite_database_url(),
        "DATABASE_POOL": "0",
        "PYTHONFAULTHANDLER": "1",
        **extra,
    }


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def notes_of(project: Project) -> Any:
    notes = {"id": "notes", "description": "N.", "provider": {"kind": "document"}}
    deployment_create(
        project=project, agent="writer", memory=[notes], promote="development", actor="t"
    )
    return resource_get(project=project, environment="development", resource_id="notes")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_projects_dripping_receivers_do_not_delay_another_projects_delivery(
    project: Project, other_project: Project, tmp_path: Any
) -> None:
    """Project A's four receivers answer a byte a second; two workers run jobs. Project
    B's delivery arrives within 15 s, each of A's attempts ends at its deadline, and no
    event is ever being sent by two workers at once."""
    a_notes, b_notes = notes_of(project), notes_of(other_project)
    drips = [DripReceiver(drip=True) for _ in range(4)]
    with contextlib.ExitStack() as stack:
        for drip in drips:
            stack.enter_context(contextlib.contextmanager(serve)(drip))
        fast = stack.enter_context(contextlib.contextmanager(serve)(Receiver()))
        for drip in drips:
            endpoint_create(project=project, url=drip.url, events=["document.created"], actor="t")
        endpoint_create(project=other_project, url=fast.url, events=["document.created"], actor="t")
        for i in range(3):
            document_create(resource=a_notes, doc_id=f"a-{i}", title="A", actor="t")
        env = worker_env(MEMORYADMIN_WEBHOOK_TIMEOUT_SECONDS="3")
        log = tmp_path / "worker.log"
        with worker(env, log), worker(env, log):
            # A's deliveries are being sent (held open by the drips).
            deadline = time.monotonic() + 20
            while sum(sum(d.open.values()) for d in drips) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            written = time.monotonic()
            document_create(resource=b_notes, doc_id="b", title="B", actor="t")
            while not fast.events() and time.monotonic() < written + 15:
                time.sleep(0.05)
            took = time.monotonic() - written
            assert fast.events(), "B's delivery did not arrive in 15 s:\n" + log.read_text()[-3000:]
            assert fast.events()[0]["type"] == "document.created"
            assert took < 15
            # Let A's attempts run into their deadline a few times.
            time.sleep(5)
    held = [h for d in drips for h in d.held]
    assert held, "no attempt of A ended"
    # Each attempt ended at its overall deadline (3 s), not when the drip ended (~240 s).
    assert max(held) < 3 + 2, held
    assert max(d.most_open for d in drips) == 1
    failed = Delivery.objects.filter(endpoint__project=project).exclude(last_error="")
    assert failed.exists()
    assert set(failed.values_list("last_error", flat=True)) == {"timed out"}
    assert Delivery.objects.get(endpoint__project=other_project).state == DeliveryState.DELIVERED


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_huge_reply_is_not_read_whole_by_the_worker(project: Project, tmp_path: Any) -> None:
    notes = notes_of(project)
    flood = DripReceiver(flood=512 << 20)
    with contextlib.contextmanager(serve)(flood):
        endpoint_create(project=project, url=flood.url, events=["document.created"], actor="t")
        document_create(resource=notes, doc_id="big", title="Big", actor="t")
        log = tmp_path / "worker.log"
        with worker(worker_env(), log) as process:
            deadline = time.monotonic() + 30
            delivery = Delivery.objects.get()
            while delivery.state != DeliveryState.DELIVERED and time.monotonic() < deadline:
                time.sleep(0.1)
                delivery.refresh_from_db()
            peak = peak_rss_mib(process.pid)
        assert delivery.state == DeliveryState.DELIVERED, log.read_text()[-3000:]
        assert delivery.response_code == 200
    assert peak < 300, f"the worker's peak memory was {peak:.0f} MiB"


def _in_thread(work: Any, **kwargs: Any) -> Any:
    """`work(**kwargs)` in a thread of the test's, which then gives back the database
    connection it opened: left open, it kept the test database from being dropped at the
    end of the run (PostgreSQL refuses to drop a database while a session uses it)."""
    try:
        return work(**kwargs)
    finally:
        connections.close_all()


# Owners' record calls hold request threads as sessions' calls do.
@pytest.mark.django_db(transaction=True)
def test_owner_record_calls_count_against_the_projects_share_of_threads(
    project: Project, other_project: Project, keys: Any, settings: Any
) -> None:
    """Project A's record list is held at its provider; with a share of one request, A's
    next call is refused at once (429, nothing sent) while project B's list is served."""
    settings.MEMORYADMIN_PROVIDER_REQUESTS_PER_PROJECT = 1
    with (
        running(FakeMem0Oss(api_key="k")) as a_server,
        running(FakeMem0Oss(api_key="k")) as b_server,
    ):
        resources = {}
        for owner, server in [(project, a_server), (other_project, b_server)]:
            declaration = {
                "kind": "mem0-oss",
                "baseUrl": server.origin,
                "scope": {"user_id": "{namespace}"},
                "headers": {"X-API-Key": {"secret": "MEM0_KEY"}},
            }
            resources[owner.id] = deploy_external(
                owner, declaration, secrets_by_origin={server.origin: {"MEM0_KEY": "k"}}
            )
        stall = a_server.stall("/memories")
        held = ThreadPoolExecutor(1)
        try:
            first = held.submit(
                _in_thread, record_list, resource=resources[project.id], namespace="alice"
            )
            assert stall.arrived.wait(30)
            started = time.monotonic()
            with pytest.raises(ProviderBusy) as refused:
                record_list(resource=resources[project.id], namespace="alice")
            assert time.monotonic() - started < 1
            assert refused.value.status == 429
            assert refused.value.details["reason"] == "concurrency_limit"
            assert len(a_server.seen("GET", "/memories")) == 1
            listed, _ = record_list(resource=resources[other_project.id], namespace="bob")
            assert listed == []
            api = APIClient()
            api.credentials(HTTP_X_API_KEY=keys.owner)
            answer = api.get(
                "/api/managed-agents/projects/acme/memory/mem/records",
                {"environment": "development", "namespace": "alice"},
            )
            assert answer.status_code == 429, answer.content
            assert answer.json()["error"]["details"]["reason"] == "concurrency_limit"
            assert int(answer["Retry-After"]) >= 1
        finally:
            stall.release.set()
            assert first.result(timeout=30) == ([], None)
            held.shutdown(wait=True)
