"""More than one instance: two gunicorn servers (real subprocesses on two ports) share
one PostgreSQL database and one Redis. Writers race across both and still have one
winner; one idempotency key still makes one session; a key revoked on one is refused
by the other within the documented bound; a rate limit counts requests on both."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from django.db import connection

from memoryadmin.agents.models import Binding, Session, SessionEvent
from memoryadmin.memory.models import ApiKey, Document, DocumentVersion, Project, Resource
from memoryadmin.memory.services.documents import document_create
from memoryadmin.memory.services.keys import api_key_create
from memoryadmin.memory.services.projects import project_create
from tests.helpers import DEV, DOCS, TEST_REDIS_URL, probe_client, run_threads
from tests.helpers import redis_prefix as redis_prefix_of

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parent.parent
# Database 5 of the local Redis unless told otherwise; the test deletes only its own keys.
RATE = 30  # requests per key and day on both instances together
PROJECT_RATE = 300  # requests of a project's keys together, a day: more than acme's tests make
REVOCATION_BOUND = 5.0  # seconds: MEMORYADMIN_API_KEY_CACHE_SECONDS at most
RW = {"notes": {"scope": "document", "id": "workshop", "access": "read-write"}}


@dataclass
class Instances:
    urls: list[str]
    prefix: str

    def url(self, index: int) -> str:
        return self.urls[index % len(self.urls)]


@pytest.fixture(scope="module")
def redis_prefix() -> Iterator[str]:
    """A cache prefix of this test in the test Redis; skips without a Redis."""
    with redis_prefix_of("instances") as (_, prefix):
        yield prefix


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _database_url() -> str:
    db = connection.settings_dict
    user = quote(db["USER"] or "")
    password = f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else ""
    host = db["HOST"] or "127.0.0.1"
    port = db["PORT"] or "5432"
    # NAME is the suite's test database (test_<name>[_gwN]), where this test's rows are.
    return f"postgres://{user}{password}@{host}:{port}/{quote(db['NAME'])}"


def _wait_until_up(process: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.monotonic() + 60
    with probe_client(timeout=2) as probe:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(f"gunicorn exited with {process.returncode}")
            try:
                if probe.get(f"{url}/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
    raise AssertionError(f"gunicorn at {url} did not answer in 60 s")


@pytest.fixture(scope="module")
def servers(
    django_db_setup: None, redis_prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Instances]:
    """Started once for the module: each test's committed rows are what they serve."""
    tmp_path = tmp_path_factory.mktemp("instances")
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "DATABASE_POOL_MAX": "8",
        "REDIS_URL": TEST_REDIS_URL,
        "MEMORYADMIN_CACHE_PREFIX": redis_prefix,
        "MEMORYADMIN_API_RATE": f"{RATE}/day",
        "MEMORYADMIN_PROJECT_API_RATE": f"{PROJECT_RATE}/day",
        "DJANGO_SETTINGS_MODULE": "memoryadmin.settings",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": "instances-test-" + "k" * 40,
        "MEMORYADMIN_PARTITION_SECRET": "instances-test-partitions",
        "MEMORYADMIN_VAR_DIR": str(tmp_path / "var"),
    }
    processes: list[subprocess.Popen[bytes]] = []
    urls = []
    try:
        for _ in range(2):
            port = _free_port()
            command = [
                sys.executable, "-m", "gunicorn", "memoryadmin.wsgi",
                "--bind", f"127.0.0.1:{port}", "--workers", "1", "--threads", "8",
                "--worker-class", "gthread", "--timeout", "60",
            ]  # fmt: skip
            processes.append(
                subprocess.Popen(
                    command,
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=(tmp_path / f"gunicorn-{port}.log").open("wb"),
                )
            )
            urls.append(f"http://127.0.0.1:{port}")
        for process, url in zip(processes, urls, strict=True):
            _wait_until_up(process, url)
        yield Instances(urls=urls, prefix=redis_prefix)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def instances(servers: Instances, transactional_db: None) -> Instances:
    return servers


def test_conditional_writers_on_two_instances_have_one_winner(
    instances: Instances, notes: Resource
) -> None:
    document = document_create(resource=notes, doc_id="race", title="Race", text="0", actor="t")
    key = api_key_create(project_id="acme")[1]

    def replace(index: int) -> tuple[int, str]:
        response = httpx.put(
            f"{instances.url(index)}{DOCS}/race{DEV}",
            json={"text": f"writer {index}"},
            headers={"x-api-key": key, "If-Match": f'"{document.revision}"'},
            timeout=60,
        )
        return response.status_code, response.text

    results = run_threads(16, replace)
    assert Counter(status for status, _ in results) == {200: 1, 412: 15}
    stored = Document.objects.get(pk=document.pk)
    winner = next(body for status, body in results if status == 200)
    assert httpx.Response(200, text=winner).json()["text"] == stored.text
    assert DocumentVersion.objects.filter(document=document).count() == 2


def test_one_idempotency_key_on_two_instances_makes_one_session(
    instances: Instances, notes: Resource
) -> None:
    document_create(resource=notes, doc_id="workshop", title="Workshop", actor="t")
    key = api_key_create(project_id="acme")[1]

    def create(index: int) -> tuple[int, dict[str, Any]]:
        response = httpx.post(
            f"{instances.url(index)}/api/managed-agents/sessions",
            json={"agentId": "support-bot@development", "memory": RW},
            headers={"x-api-key": key, "Idempotency-Key": "topic/two-instances"},
            timeout=60,
        )
        return response.status_code, response.json()

    results = run_threads(16, create)
    assert Counter(status for status, _ in results) == {201: 1, 200: 15}
    assert len({body["session"]["id"] for _, body in results}) == 1
    session = Session.objects.get()
    assert session.id == results[0][1]["session"]["id"]
    assert Binding.objects.filter(session=session).count() == 1
    assert list(SessionEvent.objects.values_list("seq", "type")) == [(1, "session.created")]


def test_a_key_revoked_on_one_instance_is_refused_by_the_other_within_the_bound(
    instances: Instances, project: Project
) -> None:
    admin = api_key_create(project_id="acme")[1]
    doomed = api_key_create(project_id="acme", name="doomed")[1]
    first, second = instances.urls
    acme = "/api/managed-agents/projects/acme"
    # Both instances have looked the key up (and may have cached it).
    for url in instances.urls:
        assert httpx.get(f"{url}{acme}", headers={"x-api-key": doomed}).status_code == 200
    key_id = ApiKey.objects.get(prefix=doomed[:12]).pk
    revoked = httpx.post(f"{first}{acme}/api-keys/{key_id}/revoke", headers={"x-api-key": admin})
    assert revoked.status_code == 200
    revoked_at = time.monotonic()
    # The instance that revoked refuses the key on its next request.
    refused = httpx.get(f"{first}{acme}", headers={"x-api-key": doomed})
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "unauthorized"
    # The other one within the bound (at once here: Redis is their shared cache).
    while True:
        status = httpx.get(f"{second}{acme}", headers={"x-api-key": doomed}).status_code
        elapsed = time.monotonic() - revoked_at
        if status == 401:
            break
        assert status == 200
        assert elapsed <= REVOCATION_BOUND, f"still accepted {elapsed:.1f} s after revocation"
        time.sleep(0.1)
    assert elapsed <= REVOCATION_BOUND
    assert ApiKey.objects.get(pk=key_id).revoked_at is not None


def test_a_rate_limit_counts_requests_on_both_instances(
    instances: Instances, project: Project
) -> None:
    key = api_key_create(project_id="acme")[1]
    other = api_key_create(project_id="acme")[1]
    path = "/api/managed-agents/projects/acme"
    day = time.gmtime().tm_yday
    statuses = [
        httpx.get(f"{instances.url(i)}{path}", headers={"x-api-key": key}).status_code
        for i in range(RATE + 2)
    ]
    if time.gmtime().tm_yday != day:
        pytest.skip("the daily window ended during the test; the counts started again")
    # RATE requests in all, half on each instance, then both refuse.
    assert statuses == [200] * RATE + [429, 429]
    for url in instances.urls:
        response = httpx.get(f"{url}{path}", headers={"x-api-key": key})
        assert response.status_code == 429
        retry_after = int(response.headers["Retry-After"])
        assert 1 <= retry_after <= 86400
        assert response.json()["error"]["code"] == "rate_limited"
        assert response.json()["error"]["details"] == {"retryAfter": retry_after}
    # Another key has its own count.
    assert httpx.get(f"{instances.url(0)}{path}", headers={"x-api-key": other}).status_code == 200


def test_a_projects_many_keys_share_one_rate_on_both_instances(
    instances: Instances, project: Project
) -> None:
    project_create(project_id="initech", name="Initech", actor="test")
    keys = [api_key_create(project_id="initech")[1] for _ in range(12)]
    path = "/api/managed-agents/projects/initech"
    day = time.gmtime().tm_yday

    def use(index: int) -> list[int]:
        # Each key within its own rate (RATE requests), alternating between the instances.
        return [
            httpx.get(
                f"{instances.url(index + i)}{path}", headers={"x-api-key": keys[index]}, timeout=60
            ).status_code
            for i in range(RATE)
        ]

    statuses = [status for statuses in run_threads(12, use) for status in statuses]
    if time.gmtime().tm_yday != day:
        pytest.skip("the daily window ended during the test; the counts started again")
    # Twelve keys' 360 requests, at once on two instances: exactly the project's rate served.
    assert Counter(statuses) == {200: PROJECT_RATE, 429: 12 * RATE - PROJECT_RATE}
    for url in instances.urls:
        response = httpx.get(f"{url}{path}", headers={"x-api-key": keys[0]})
        assert response.status_code == 429
        error = response.json()["error"]
        assert error["code"] == "rate_limited"
        assert error["message"].startswith("This project's API keys together are over")
        assert 1 <= int(response.headers["Retry-After"]) <= 86400
    # Another project's key is served.
    acme = api_key_create(project_id="acme")[1]
    served = httpx.get(
        f"{instances.url(0)}/api/managed-agents/projects/acme", headers={"x-api-key": acme}
    )
    assert served.status_code == 200
