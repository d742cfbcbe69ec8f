"""Database outages: 503 with Retry-After (API envelope, Memory page), liveness and
readiness probes, and recovery without a restart once the database is back."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connection, transaction
from django.test import Client
from rest_framework.test import APIClient

from memoryadmin.memory.models import Document
from memoryadmin.memory.services.keys import api_key_create
from tests.helpers import (
    DEV,
    DOCS,
    Keys,
    People,
    TcpProxy,
    clean_env,
    free_port,
    gunicorn,
    probe_client,
    suite_database_url,
)


def test_healthz_is_liveness_and_answers_json(client: Any) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_checks_the_database(client: Any, db: None, settings: Any) -> None:
    settings.REDIS_URL = ""
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": "ok"}}


@pytest.mark.parametrize("app", ["memory", "auth"])
def test_readyz_is_unavailable_while_a_migration_of_this_code_is_not_applied(
    client: Any, db: None, settings: Any, app: str
) -> None:
    """A new release started before its `migrate` ran: the load balancer must not send it
    requests its tables cannot serve. The check reads what `migrate` recorded (rolled back
    with the test)."""
    from django.db.migrations.recorder import MigrationRecorder

    settings.REDIS_URL = ""
    recorded = MigrationRecorder.Migration.objects.filter(app=app)
    latest = recorded.order_by("-applied", "-id").first()
    assert latest is not None
    latest.delete()
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json() == {
        "status": "unavailable",
        "checks": {"database": "migrations pending"},
    }
    MigrationRecorder(connection).record_applied(app, latest.name)
    assert client.get("/readyz").json() == {"status": "ok", "checks": {"database": "ok"}}


@pytest.mark.postgres
def test_a_table_its_migrations_have_not_made_answers_503_not_500(
    keys: Keys, people: People
) -> None:
    """PostgreSQL says "undefined table" as a programming error, SQLite as an operational
    one: either way the database is not ready for this release, and the API and the pages
    answer as they do while it is away. The table is renamed inside the test's transaction
    (PostgreSQL rolls it back with it); each request runs in a savepoint, as its failed
    statement would otherwise end the test's transaction for the next."""
    api = APIClient(raise_request_exception=False)
    api.credentials(HTTP_X_API_KEY=keys.owner)
    browser = Client(raise_request_exception=False)
    browser.force_login(people.owner)

    def answer(path: str, client: Any) -> Any:
        savepoint = transaction.savepoint_create()
        try:
            return client.get(path)
        finally:
            transaction.savepoint_rollback(savepoint)

    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE memory_document RENAME TO memory_document_elsewhere")
    listed = answer("/api/managed-agents/projects/acme/memory" + DEV, api)
    assert listed.status_code == 503
    assert listed["Retry-After"] == "5"
    assert listed.json()["error"]["code"] == "service_unavailable"
    page = answer("/projects/acme/development/", browser)
    assert page.status_code == 503
    assert page["Retry-After"] == "5"
    assert "Temporarily unavailable" in page.content.decode()


def test_readyz_of_a_database_never_migrated_is_unavailable(tmp_path: Path, settings: Any) -> None:
    """Served by gunicorn on a new SQLite file, as a first deployment that skipped
    `migrate`: live, not ready, and the file still empty (the check creates nothing)."""
    new = tmp_path / "new.sqlite3"
    env = clean_env(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DJANGO_SECRET_KEY=settings.SECRET_KEY,
        DATABASE_URL=f"sqlite:///{new}",
        MEMORYADMIN_VAR_DIR=str(tmp_path),
    )
    with gunicorn(env, workers=1, threads=2) as base, probe_client(timeout=30) as http:
        assert http.get(base + "/healthz").status_code == 200
        ready = http.get(base + "/readyz")
        assert ready.status_code == 503
        assert ready.json() == {
            "status": "unavailable",
            "checks": {"database": "migrations pending"},
        }
    with sqlite3.connect(new) as database:
        assert database.execute("SELECT name FROM sqlite_master").fetchall() == []


def test_readyz_reports_redis_down_as_degraded_but_ready(
    client: Any, db: None, settings: Any
) -> None:
    """The API serves without its shared cache, so the instance stays in the load balancer."""
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    response = client.get("/readyz")
    assert response.status_code == 200
    assert "Retry-After" not in response
    assert response.json() == {
        "status": "degraded",
        "checks": {"database": "ok", "redis": "unavailable"},
    }


def test_readyz_with_a_live_redis(client: Any, db: None, settings: Any) -> None:
    import redis

    settings.REDIS_URL = "redis://127.0.0.1:6379/0"
    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1).ping()
    except redis.RedisError:
        pytest.skip("no Redis on 127.0.0.1:6379")
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "redis": "ok"}


@pytest.fixture
def proxy(settings: Any) -> Iterator[TcpProxy]:
    database = settings.DATABASES["default"]
    proxy = TcpProxy(int(database["PORT"] or 5432), database["HOST"] or "127.0.0.1")
    try:
        yield proxy
    finally:
        proxy.close()


def wait_for(url: str, status: int, seconds: float = 60) -> httpx.Response:
    deadline = time.monotonic() + seconds
    with probe_client(timeout=10) as probe:
        while True:
            response = probe.get(url)
            if response.status_code == status or time.monotonic() > deadline:
                return response
            time.sleep(0.1)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_database_outage_answers_503_and_recovers_without_a_restart(
    proxy: TcpProxy, people: People, settings: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """gunicorn reaches PostgreSQL through a proxy; cutting the proxy is the outage."""
    _, raw = api_key_create(project_id="acme", name="outage")
    browser = Client()
    browser.force_login(people.owner)
    cookies = {"sessionid": browser.cookies["sessionid"].value}
    database = settings.DATABASES["default"]
    env = clean_env(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DJANGO_SECRET_KEY=settings.SECRET_KEY,
        DATABASE_URL=f"postgres://{database['USER']}@127.0.0.1:{proxy.port}/{database['NAME']}",
        DATABASE_POOL_TIMEOUT="1",
        DATABASE_CONNECT_TIMEOUT="1",
    )
    api = {"x-api-key": raw}
    inventory = "/api/managed-agents/projects/acme/memory" + DEV
    page = "/projects/acme/development/"
    with gunicorn(env, workers=1, threads=4) as base:
        assert httpx.get(base + inventory, headers=api).status_code == 200
        assert httpx.get(base + page, cookies=cookies).status_code == 200
        assert httpx.get(base + "/readyz").json()["status"] == "ok"

        proxy.cut()

        down = httpx.get(base + inventory, headers=api, timeout=30)
        assert down.status_code == 503
        assert down.headers["Retry-After"] == "5"
        assert down.json() == {
            "error": {
                "code": "service_unavailable",
                "message": "The database is unavailable; retry in 5 seconds.",
                "details": {"retryAfter": 5},
            }
        }
        write = httpx.put(
            f"{base}{DOCS}/during-outage{DEV}",
            headers={**api, "If-None-Match": "*"},
            json={"title": "Lost?", "text": "written while the database was away"},
            timeout=30,
        )
        assert write.status_code == 503
        assert write.json()["error"]["code"] == "service_unavailable"

        memory_page = httpx.get(base + page, cookies=cookies, timeout=30)
        assert memory_page.status_code == 503
        assert memory_page.headers["Retry-After"] == "5"
        assert memory_page.headers["content-type"].startswith("text/html")
        assert "Temporarily unavailable" in memory_page.text
        assert "/static/memoryadmin/memory.css" in memory_page.text  # the site's layout

        alive = httpx.get(base + "/healthz")
        assert alive.status_code == 200
        assert alive.json() == {"status": "ok"}
        ready = httpx.get(base + "/readyz", timeout=30)
        assert ready.status_code == 503
        assert ready.headers["Retry-After"] == "5"
        assert ready.json() == {"status": "unavailable", "checks": {"database": "unavailable"}}

        # The request log says what the client got.
        out, err = capfd.readouterr()
        failed = [
            line
            for line in (out + err).splitlines()
            if line.startswith("{") and json.loads(line).get("event") == "request_failed"
        ]
        assert failed
        assert {json.loads(line)["code"] for line in failed} == {503}
        # The database is away, the code is not wrong: a warning, its reason, no traceback.
        assert {json.loads(line)["level"] for line in failed} == {"warning"}
        assert all(
            json.loads(line)["error"].startswith("database unavailable: ") for line in failed
        )
        assert not [line for line in failed if "exception" in json.loads(line)]
        path = inventory.split("?")[0]
        assert any(json.loads(line)["request"] == f"GET {path}" for line in failed)

        proxy.restore()

        assert wait_for(base + "/readyz", 200).status_code == 200
        assert httpx.get(base + inventory, headers=api).status_code == 200
        assert httpx.get(base + page, cookies=cookies).status_code == 200
    # The write refused during the outage changed nothing.
    assert not Document.objects.filter(doc_id="during-outage").exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_worker_waits_out_a_database_outage_and_runs_jobs_after_it(
    proxy: TcpProxy, settings: Any, tmp_path: Path
) -> None:
    """The worker reaches PostgreSQL through a proxy; cutting the proxy is the outage. It
    ended with a traceback at its next sweep; now it says so once and carries on."""
    from memoryadmin.runner.models import Job
    from tests.helpers import manage, worker_start, worker_stop

    database = settings.DATABASES["default"]
    common = {
        "MEMORYADMIN_DEV_SECRETS": "1",
        "MEMORYADMIN_VAR_DIR": str(tmp_path / "var"),
        "MEMORYADMIN_TASKS_QUEUE": f"outage-{free_port()}",
    }
    env = clean_env(
        DATABASE_URL=f"postgres://{database['USER']}@127.0.0.1:{proxy.port}/{database['NAME']}",
        DATABASE_POOL_TIMEOUT="1",
        DATABASE_CONNECT_TIMEOUT="1",
        **common,
    )
    log = tmp_path / "worker.log"
    deadline = time.monotonic() + 90

    def until(text: str) -> None:
        while text not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert text in log.read_text(), log.read_text()[-3000:]

    worker = worker_start(env, log)
    try:
        until("running jobs on")
        proxy.cut()
        until("worker: the database cannot be used")
        assert worker.poll() is None, log.read_text()[-3000:]
        proxy.restore()
        until("worker: the database is back")
        marker = tmp_path / "m"
        Path(f"{marker}.go").touch()  # the job writes at once
        code = "from tests.runner_jobs import *; enqueue_marked(write_when_told, 'outage', {!r})"
        code = code.format(str(marker))
        enqueued = manage(
            "shell", "-c", code, env=clean_env(DATABASE_URL=suite_database_url(), **common)
        )
        assert enqueued.returncode == 0, enqueued.stderr[-3000:]
        job = Job.objects.get(kwargs__label="outage")
        while Job.objects.get(pk=job.pk).state != "done" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert Job.objects.get(pk=job.pk).state == "done", log.read_text()[-3000:]
    finally:
        worker_stop(worker, log)
    assert worker.returncode == 0, log.read_text()[-3000:]
    text = log.read_text()
    # Once when the outage began (a pooled connection found dead after it may say so again).
    assert text.count("worker: the database cannot be used") >= 1, text[-3000:]
    assert "Traceback" not in text


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_redis_outage_keeps_instances_ready_and_serving(project: Any, settings: Any) -> None:
    """gunicorn reaches Redis through a proxy; cutting it is the outage. The API keeps
    answering, so /readyz stays 200 (status degraded) and no load balancer drops it."""
    import redis

    try:
        redis.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=1).ping()
    except redis.RedisError:
        pytest.skip("no Redis on 127.0.0.1:6379 (.ci/run starts one)")
    _, raw = api_key_create(project_id="acme", name="redis-outage")
    redis_proxy = TcpProxy(6379)
    env = clean_env(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DJANGO_SECRET_KEY=settings.SECRET_KEY,
        DATABASE_URL=suite_database_url(),
        REDIS_URL=f"redis://127.0.0.1:{redis_proxy.port}/5",
    )
    api = {"x-api-key": raw}
    inventory = "/api/managed-agents/projects/acme/memory" + DEV
    try:
        with gunicorn(env, workers=1, threads=4) as base:
            ready = httpx.get(base + "/readyz", timeout=30)
            assert ready.status_code == 200
            assert ready.json() == {"status": "ok", "checks": {"database": "ok", "redis": "ok"}}

            redis_proxy.cut()

            assert httpx.get(base + inventory, headers=api, timeout=30).status_code == 200
            ready = httpx.get(base + "/readyz", timeout=30)
            assert ready.status_code == 200
            assert ready.json() == {
                "status": "degraded",
                "checks": {"database": "ok", "redis": "unavailable"},
            }

            redis_proxy.restore()

            ready = httpx.get(base + "/readyz", timeout=30)
            assert ready.json()["status"] == "ok"
    finally:
        redis_proxy.close()
