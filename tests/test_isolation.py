"""No project can stall another: one project's key, hostile but authorised, against
the production server (gunicorn with gunicorn.conf.py and its shipped thread and
worker counts, PostgreSQL) and the background worker.

Every server here is real and on 127.0.0.1: gunicorn as a subprocess, providers
and webhook receivers as threads of this process that hold or drip their answers.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from django.conf import settings as django_settings

from memoryadmin.agents.services.sessions import session_create
from memoryadmin.memory.models import Project
from memoryadmin.memory.services.deployments import deployment_create, resource_get
from memoryadmin.memory.services.documents import document_create
from memoryadmin.memory.services.keys import api_key_create
from tests.helpers import clean_env, gunicorn, suite_database_url

SESSIONS = "/api/managed-agents/sessions"
# gunicorn.conf.py's defaults: two workers of four threads.
WORKERS, THREADS = 2, 4


class HeldProvider(ThreadingHTTPServer):
    """An http memory provider whose recalls answer only once `release` is set."""

    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _HeldHandler)
        self.release = threading.Event()
        self.arrived = 0
        self.lock = threading.Lock()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _HeldHandler(BaseHTTPRequestHandler):
    server: HeldProvider
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            self.server.arrived += 1
        self.server.release.wait(30)
        payload = json.dumps({"text": "held", "sources": []}).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def held_provider() -> Iterator[HeldProvider]:
    server = HeldProvider()
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()


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
                # A holds what it may of the server's threads.
                deadline = time.monotonic() + 20
                while provider.arrived < WORKERS * (THREADS // 2) and time.monotonic() < deadline:
                    time.sleep(0.05)
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
                assert provider.arrived <= WORKERS * (THREADS // 2)
            finally:
                provider.release.set()
                storm.shutdown(wait=True)
            answered = [f.result() for f in recalls]
            assert {r.status_code for r in answered} <= {200, 429}
            assert sum(r.status_code == 200 for r in answered) == provider.arrived
