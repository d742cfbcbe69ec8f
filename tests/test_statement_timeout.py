"""How long one database statement of a request may run (MEMORYADMIN_STATEMENT_TIMEOUT_SECONDS):
past it PostgreSQL cancels the statement and the request is answered 503; a download's reads
may run its own deadline; the worker and the commands have no bound."""

from __future__ import annotations

import io
import json
import threading
import time
import zipfile
from typing import Any

import httpx
import pytest
from django.db import connection, transaction

from memoryadmin.memory.models import Document, Resource
from memoryadmin.memory.services.documents import document_create
from memoryadmin.settings import database_from_url, serves_requests
from tests.helpers import DEV, DOCS, Keys, clean_env, gunicorn, manage, suite_database_url

API = "/api/managed-agents/projects/acme"


def served_env(settings: Any, **extra: str) -> dict[str, str]:
    return clean_env(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DJANGO_SECRET_KEY=settings.SECRET_KEY,
        DATABASE_URL=suite_database_url(),
        MEMORYADMIN_STATEMENT_TIMEOUT_SECONDS="0.5",
        **extra,
    )


@pytest.mark.parametrize(
    ("argv", "serves"),
    [
        (["manage.py", "runserver"], True),
        (["manage.py", "runserver", "127.0.0.1:8000"], True),
        (["manage.py", "mcp", "--http", "127.0.0.1:8001"], True),
        (["manage.py", "mcp", "--http=127.0.0.1:8001"], True),
        (["manage.py", "mcp", "--project", "acme", "--agent", "bot"], False),
        (["manage.py", "worker"], False),
        (["manage.py", "memory", "export", "--project", "acme"], False),
        (["manage.py", "migrate"], False),
        (["pytest"], False),
    ],
)
def test_only_processes_that_serve_requests_bound_their_statements(
    argv: list[str], serves: bool, monkeypatch: Any
) -> None:
    monkeypatch.delenv("MEMORYADMIN_SERVES_REQUESTS", raising=False)
    assert serves_requests(argv) is serves
    monkeypatch.setenv("MEMORYADMIN_SERVES_REQUESTS", "1")  # gunicorn.conf.py's workers
    assert serves_requests(argv) is True


def test_the_bound_is_a_connection_option_after_which_the_urls_own_come() -> None:
    url = "postgres://someone@db.example:5432/memoryadmin"
    assert "options" not in database_from_url(url)["OPTIONS"]
    assert database_from_url(url, statement_timeout=30)["OPTIONS"]["options"] == (
        "-c statement_timeout=30000"
    )
    own = database_from_url(url + "?options=-c%20statement_timeout%3D5s", statement_timeout=0.25)
    assert own["OPTIONS"]["options"] == "-c statement_timeout=250 -c statement_timeout=5s"
    sqlite = database_from_url("sqlite:///tmp/x.sqlite3", statement_timeout=30)
    assert "options" not in sqlite["OPTIONS"]


SHOW = (
    "from django.db import connection\n"
    "with connection.cursor() as c:\n"
    "    c.execute('SHOW statement_timeout'); print(c.fetchone()[0])\n"
)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_commands_and_the_worker_have_no_bound_and_a_server_has_it(settings: Any) -> None:
    """The same environment as the server's: a command's connection (the worker's, an
    export's, a migration's) has no statement_timeout; one of a process serving requests
    has the setting's."""
    env = served_env(settings)
    command = manage("shell", "-c", SHOW, env=env)
    assert command.returncode == 0, command.stderr
    assert command.stdout.splitlines()[-1] == "0"
    served = manage("shell", "-c", SHOW, env={**env, "MEMORYADMIN_SERVES_REQUESTS": "1"})
    assert served.returncode == 0, served.stderr
    assert served.stdout.splitlines()[-1] == "500ms"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_statement_past_the_bound_is_answered_503_and_the_server_keeps_serving(
    keys: Keys, notes: Resource, settings: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """A PUT whose UPDATE waits on the document's row, locked by another connection, past
    the bound: cancelled, 503 in the envelope saying the request took too long, nothing
    written; the same server then writes the document once the lock is gone. Not the
    code's fault: logged as one warning line saying the statement ran past its bound,
    where it was logged as an error with its traceback, twice, and called an outage."""
    document = document_create(resource=notes, doc_id="held", title="T", text="before", actor="t")
    api = {"x-api-key": keys.owner, "If-Match": f'"{document.revision}"'}
    url = f"{DOCS}/held{DEV}"
    body = {"text": "after"}
    with gunicorn(served_env(settings), workers=1, threads=2) as base:
        with transaction.atomic():
            Document.objects.select_for_update().get(pk=document.pk)
            held = httpx.put(base + url, headers=api, json=body, timeout=60)
        assert held.status_code == 503, held.text
        assert held.headers["Retry-After"] == "5"
        assert held.json() == {
            "error": {
                "code": "service_unavailable",
                "message": "The request took too long; retry in 5 seconds.",
                "details": {"retryAfter": 5},
            }
        }
        out, err = capfd.readouterr()
        logged = [json.loads(line) for line in (out + err).splitlines() if line.startswith("{")]
        failed = [line for line in logged if line.get("request") == f"PUT {DOCS}/held"]
        assert len(failed) == 1, logged
        request_id = failed[0]["request_id"]
        assert [line for line in logged if line.get("request_id") == request_id] == failed
        assert {name: failed[0][name] for name in ("event", "code", "level", "error")} == {
            "event": "request_failed",
            "code": 503,
            "level": "warning",
            "error": "a statement ran past its time bound (statement_timeout): "
            "canceling statement due to statement timeout",
        }
        assert "exception" not in failed[0]
        stored = Document.objects.get(pk=document.pk)
        assert (stored.text, stored.revision) == ("before", document.revision)

        written = httpx.put(base + url, headers=api, json=body, timeout=60)
        assert written.status_code == 200, written.text
        assert Document.objects.get(pk=document.pk).text == "after"


def _someone_waits_on_me() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks "
            "WHERE NOT granted AND pg_backend_pid() = ANY(pg_blocking_pids(pid))"
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def _read_held_up(table: str, read: Any) -> Any:
    """`read()` in a thread while `table` is locked against reads by this connection,
    released once the read has waited on it for longer than the bound (0.5 s)."""
    answer: list[Any] = []
    thread = threading.Thread(target=lambda: answer.append(read()))
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        thread.start()
        while not _someone_waits_on_me():
            assert thread.is_alive(), answer
            time.sleep(0.05)
        time.sleep(1.5)  # three times the bound: a statement bounded by it is cancelled
    thread.join(timeout=60)
    assert answer, "no answer"
    return answer[0]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_export_download_is_bounded_by_its_deadline_not_by_a_requests(
    keys: Keys, notes: Resource, settings: Any
) -> None:
    """The export's reads scale with the project's data: a read held up past the statement
    bound still completes the download, whole (its manifest is last)."""
    for i in range(3):
        document_create(resource=notes, doc_id=f"n{i}", title="t", text="x", actor="t")
    with gunicorn(served_env(settings), workers=1, threads=2) as base:

        def read() -> httpx.Response:
            return httpx.post(
                f"{base}{API}/memory/export{DEV}&resource=notes",
                headers={"x-api-key": keys.owner},
                timeout=60,
            )

        response = _read_held_up("memory_document", read)
    assert response.status_code == 200
    names = zipfile.ZipFile(io.BytesIO(response.content)).namelist()
    assert "manifest.json" in names
    assert sorted(name for name in names if name.startswith("notes/n")) == [
        "notes/n0.json",
        "notes/n1.json",
        "notes/n2.json",
    ]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_audit_log_download_is_bounded_by_its_deadline_not_by_a_requests(
    people: Any, notes: Resource, settings: Any
) -> None:
    from django.test import Client

    for i in range(3):
        document_create(resource=notes, doc_id=f"a{i}", title="t", text="x", actor="t")
    browser = Client()
    browser.force_login(people.owner)
    cookies = {"sessionid": browser.cookies["sessionid"].value}
    with gunicorn(served_env(settings), workers=1, threads=2) as base:

        def read() -> httpx.Response:
            return httpx.get(
                f"{base}/projects/acme/development/audit/download/?format=jsonl",
                cookies=cookies,
                timeout=60,
            )

        response = _read_held_up("memory_auditentry", read)
    assert response.status_code == 200
    lines = response.text.splitlines()
    assert sum('"document.create"' in line for line in lines) == 3, lines
