"""The request stack's own work, done once where it can be: the CSP header, metric series,
the pool gauges, request ids and timestamps; every request still gets all of it."""

from __future__ import annotations

import json
import logging
import re
import uuid
from typing import Any

import pytest
import structlog
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path
from django.utils.csp import CSP, build_policy
from django.views.decorators.csp import csp_override

from memoryadmin import logs, metrics
from tests.helpers import is_postgres
from tests.test_observability import LogLines, log_lines  # noqa: F401 - the fixture


def _plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("plain")


@csp_override({"default-src": [CSP.NONE]})
def _own_policy(request: HttpRequest) -> HttpResponse:
    return HttpResponse("own")


def _nonce(request: HttpRequest) -> HttpResponse:
    return HttpResponse(f"nonce {request._csp_nonce}")  # type: ignore[attr-defined]


def _logging(request: HttpRequest) -> HttpResponse:
    logging.getLogger("memoryadmin.somewhere").warning("standard %s", "line")
    with structlog.contextvars.bound_contextvars(job="j-1"):
        structlog.get_logger("memoryadmin.elsewhere").warning("structlog_line", n=1)
    return HttpResponse("logged")


urlpatterns = [
    path("plain", _plain),
    path("own", _own_policy),
    path("nonce", _nonce),
    path("logging", _logging),
]


@pytest.mark.urls(__name__)
def test_the_policy_is_the_settings_and_follows_them(settings: Any) -> None:
    client = Client()
    assert client.get("/plain")["Content-Security-Policy"] == build_policy(settings.SECURE_CSP)
    assert "Content-Security-Policy-Report-Only" not in client.get("/plain")
    settings.SECURE_CSP = {"default-src": [CSP.SELF], "img-src": [CSP.SELF, "data:"]}
    settings.SECURE_CSP_REPORT_ONLY = {"script-src": [CSP.NONE]}
    response = client.get("/plain")
    assert response["Content-Security-Policy"] == "default-src 'self'; img-src 'self' data:"
    assert response["Content-Security-Policy-Report-Only"] == "script-src 'none'"
    # Changed in place, the setting still counts.
    settings.SECURE_CSP["img-src"].append("https://images.example")
    changed = client.get("/plain")["Content-Security-Policy"]
    assert changed == "default-src 'self'; img-src 'self' data: https://images.example"
    settings.SECURE_CSP = {}
    assert "Content-Security-Policy" not in client.get("/plain")


@pytest.mark.urls(__name__)
def test_a_view_s_own_policy_and_a_used_nonce_are_kept(settings: Any) -> None:
    client = Client()
    assert client.get("/own")["Content-Security-Policy"] == "default-src 'none'"
    settings.SECURE_CSP = {"script-src": [CSP.SELF, CSP.NONCE]}
    response = client.get("/nonce")
    nonce = response.content.decode().removeprefix("nonce ")
    assert response["Content-Security-Policy"] == f"script-src 'self' 'nonce-{nonce}'"
    # Unused, the nonce is left out.
    assert client.get("/plain")["Content-Security-Policy"] == "script-src 'self'"


def test_request_ids_are_random_uuids_and_timestamps_microseconds(
    log_lines: LogLines,  # noqa: F811
) -> None:
    client = Client()
    for _ in range(3):
        assert client.get("/healthz").status_code in (200, 503)
    lines = [line for line in log_lines() if line.get("request") == "GET /healthz"]
    assert len(lines) == 3
    ids = [line["request_id"] for line in lines]
    assert len(set(ids)) == 3
    for request_id in ids:
        parsed = uuid.UUID(request_id)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == request_id
    for line in lines:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", line["timestamp"])


@pytest.mark.urls(__name__)
def test_lines_written_while_a_request_runs_carry_its_id_and_address(
    log_lines: LogLines,  # noqa: F811
) -> None:
    response = Client(REMOTE_ADDR="10.0.0.9").get("/logging")
    assert response.status_code == 200
    lines = log_lines()
    (standard,) = [line for line in lines if line.get("event") == "standard line"]
    (bound,) = [line for line in lines if line.get("event") == "structlog_line"]
    (done,) = [line for line in lines if line.get("request") == "GET /logging"]
    assert done["event"] == "request_finished"
    uuid.UUID(done["request_id"])
    for line in (standard, bound):
        assert line["request_id"] == done["request_id"]
        assert line["ip"] == "10.0.0.9"
        assert line["level"] == "warning"
    assert standard["logger"] == "memoryadmin.somewhere"
    # What code binds itself is merged too, and only while it is bound.
    assert bound["job"] == "j-1"
    assert bound["n"] == 1
    assert "job" not in done
    # After the request, nothing of it is left in the context.
    logging.getLogger("memoryadmin.somewhere").warning("after")
    (after,) = [line for line in log_lines() if line.get("event") == "after"]
    assert "request_id" not in after
    assert "ip" not in after
    # The records skip what no line shows; the process id stays for gunicorn's lines.
    assert (logging.logThreads, logging.logMultiprocessing, logging.logProcesses) == (
        False,
        False,
        True,
    )


def test_a_line_with_an_unpaired_surrogate_is_still_one_json_object(
    log_lines: LogLines,  # noqa: F811
) -> None:
    logs.request_log(logging.WARNING, "odd", request="GET /\ud800")
    (line,) = [line for line in log_lines() if line["event"] == "odd"]
    assert line["request"] == "GET /\ud800"
    assert line["level"] == "warning"


@pytest.mark.postgres
def test_pool_gauges_are_written_once_a_second_and_at_each_scrape(
    api: Any, client: Any, settings: Any, project: Any
) -> None:
    assert is_postgres()
    settings.MEMORYADMIN_METRICS_TOKEN = "scrape-token"
    maximum = settings.DATABASES["default"]["OPTIONS"]["pool"]["max_size"]
    gauge = metrics.POOL.labels("max")
    gauge.set(-1)
    assert api.get("/api/managed-agents/projects/acme").status_code == 200
    assert gauge._value.get() == maximum  # the client's first request
    gauge.set(-1)
    assert api.get("/api/managed-agents/projects/acme").status_code == 200
    assert gauge._value.get() == -1  # within the second: not written again
    scraped = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-token")
    assert scraped.status_code == 200
    assert f'memoryadmin_db_pool_connections{{state="max"}} {float(maximum)}' in (
        scraped.content.decode()
    )
    assert gauge._value.get() == maximum


def test_each_request_is_counted_with_the_series_looked_up_once(client: Any) -> None:
    counter = metrics.REQUESTS.labels("GET", "/healthz", "200")
    before = counter._value.get()
    statuses = [client.get("/healthz").status_code for _ in range(3)]
    assert statuses == [200, 200, 200]
    assert counter._value.get() == before + 3
    assert json.loads(client.get("/healthz").content)  # a fourth, counted too
    assert counter._value.get() == before + 4
