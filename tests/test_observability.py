"""JSON request logs without secrets or text, and Prometheus metrics at /metrics."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from django.urls import path
from prometheus_client.parser import text_string_to_metric_families

from memoryadmin.memory.services.keys import api_key_create
from tests.helpers import DEV, DOCS, People, is_postgres, streamed

LogLines = Callable[[], list[dict[str, Any]]]


@pytest.fixture
def log_lines() -> Iterator[LogLines]:
    """What the configured console handler writes, one parsed JSON object per line."""
    handler = next(h for h in logging.getLogger().handlers if h.name == "console")
    stream = io.StringIO()
    previous = handler.setStream(stream)  # type: ignore[attr-defined]
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        handler.setStream(previous)  # type: ignore[attr-defined]
    # Every line is one JSON object (json.loads above would have failed otherwise).
    assert stream.getvalue().endswith("\n") or not stream.getvalue()


def finished(lines: list[dict[str, Any]], request: str) -> dict[str, Any]:
    found = [line for line in lines if line.get("request") == request]
    assert len(found) == 1, lines
    assert found[0]["event"] == "request_finished"
    return found[0]


@pytest.mark.django_db(transaction=True)
def test_request_logs_name_request_project_key_status_and_duration_never_secrets(
    live_server: Any, project: Any, log_lines: LogLines
) -> None:
    key, raw = api_key_create(project_id="acme", name="logs")
    text = "The launch code is 7-alpha-secret-body; keep it out of the logs."
    url = f"{live_server.url}{DOCS}/launch{DEV}"
    headers = {"x-api-key": raw}
    created = httpx.put(
        url, headers={**headers, "If-None-Match": "*"}, json={"title": "Launch", "text": text}
    )
    assert created.status_code == 201, created.text
    assert httpx.get(url, headers=headers).status_code == 200
    wrong = raw[:-4] + "zzzz"
    assert httpx.get(url, headers={"x-api-key": wrong}).status_code == 401

    lines = log_lines()
    path = f"{DOCS}/launch"
    put = finished(lines, f"PUT {path}")
    assert put["code"] == 201
    assert put["project"] == "acme"
    assert put["key"] == key.prefix
    assert put["level"] == "info"
    assert isinstance(put["duration_ms"], float)
    assert put["duration_ms"] > 0
    assert len(put["request_id"]) == 36
    assert put["timestamp"].endswith("Z")
    get = next(
        line for line in lines if line.get("request") == f"GET {path}" and line["code"] == 200
    )
    assert get["key"] == key.prefix
    assert get["request_id"] != put["request_id"]
    refused = next(line for line in lines if line.get("code") == 401)
    assert refused["project"] == "acme"
    assert "key" not in refused

    output = json.dumps(lines)
    assert raw not in output
    assert wrong not in output
    assert "7-alpha-secret-body" not in output
    assert "environment=development" not in output  # no query strings


def test_page_logs_name_the_user_never_the_password(
    people: People, web_client_for: Callable[[Any], Any], log_lines: LogLines
) -> None:
    from django.test import Client

    from tests.helpers import PASSWORD

    assert Client().post("/login/", {"username": "olivia", "password": PASSWORD}).status_code == 302
    web = web_client_for(people.owner)
    assert web.get("/projects/acme/development/").status_code == 200
    lines = log_lines()
    page = finished(lines, "GET /projects/acme/development/")
    assert page["user"] == "olivia"
    assert page["project"] == "acme"
    login = finished(lines, "POST /login/")
    assert login["code"] == 302
    assert PASSWORD not in json.dumps(lines)


def scrape(client: Any, token: str = "scrape-token") -> dict[tuple[str, tuple[Any, ...]], float]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return samples(response.content.decode())


def samples(text: str) -> dict[tuple[str, tuple[Any, ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


ROUTE = "/api/managed-agents/projects/<str:p>/memory/<str:r>/documents"


def test_metrics_are_off_without_a_token(client: Any, settings: Any) -> None:
    settings.MEMORYADMIN_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 404


def test_metrics_need_the_bearer_token(client: Any, settings: Any) -> None:
    settings.MEMORYADMIN_METRICS_TOKEN = "scrape-token"
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-tokem")
    assert wrong.status_code == 401
    assert wrong["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert b"memoryadmin_" not in wrong.content


def test_metrics_count_and_time_requests_by_route(
    api: Any, client: Any, settings: Any, make_document: Any
) -> None:
    settings.MEMORYADMIN_METRICS_TOKEN = "scrape-token"
    make_document("a")
    labels = (("method", "GET"), ("route", ROUTE), ("status", "200"))
    timing = (("method", "GET"), ("route", ROUTE))
    before = scrape(client)
    for _ in range(3):
        assert api.get(f"{DOCS}{DEV}").status_code == 200
    assert api.get(f"{DOCS}?environment=staging").status_code == 400
    after = scrape(client)
    assert after[("memoryadmin_http_requests_total", labels)] == (
        before.get(("memoryadmin_http_requests_total", labels), 0) + 3
    )
    bad = (("method", "GET"), ("route", ROUTE), ("status", "400"))
    assert after[("memoryadmin_http_requests_total", bad)] == (
        before.get(("memoryadmin_http_requests_total", bad), 0) + 1
    )
    count = "memoryadmin_http_request_duration_seconds_count"
    assert after[(count, timing)] == before.get((count, timing), 0) + 4
    slowest = (*timing, ("le", "+Inf"))
    assert after[("memoryadmin_http_request_duration_seconds_bucket", tuple(sorted(slowest)))] >= 4
    # Unknown paths share one series instead of one per path.
    assert api.get("/api/managed-agents/nope/123").status_code == 404
    unmatched = (("method", "GET"), ("route", "<unmatched>"), ("status", "404"))
    assert scrape(client)[("memoryadmin_http_requests_total", unmatched)] >= 1


def test_methods_a_client_makes_up_share_one_series(api: Any, client: Any, settings: Any) -> None:
    settings.MEMORYADMIN_METRICS_TOKEN = "scrape-token"
    for method in ("BREW", "PROPFIND", "X" * 40):
        assert api.generic(method, f"{DOCS}{DEV}").status_code == 405
    values = scrape(client)
    other = (("method", "<other>"), ("route", ROUTE), ("status", "405"))
    assert values[("memoryadmin_http_requests_total", other)] >= 3
    methods = {dict(labels)["method"] for name, labels in values if "method" in dict(labels)}
    assert not methods & {"BREW", "PROPFIND", "X" * 40}


@pytest.mark.postgres
def test_metrics_report_the_database_pool(
    api: Any, client: Any, settings: Any, project: Any
) -> None:
    assert is_postgres()
    settings.MEMORYADMIN_METRICS_TOKEN = "scrape-token"
    assert api.get("/api/managed-agents/projects/acme").status_code == 200
    values = scrape(client)
    pool = {
        state: values.get(("memoryadmin_db_pool_connections", (("state", state),)))
        for state in ("open", "idle", "max", "waiting")
    }
    assert pool["max"] == settings.DATABASES["default"]["OPTIONS"]["pool"]["max_size"]
    assert pool["open"] is not None
    assert pool["open"] >= 1
    assert pool["waiting"] == 0


def test_request_ids_addresses_and_streamed_answers_in_the_log(
    project: Any, log_lines: LogLines, settings: Any
) -> None:
    from django.test import Client

    key, raw = api_key_create(project_id="acme", name="logs")
    api = Client(HTTP_X_API_KEY=raw, REMOTE_ADDR="10.0.0.1")
    forwarded: dict[str, Any] = {
        "HTTP_X_FORWARDED_FOR": "6.6.6.6, 1.2.3.4",
        "HTTP_X_REQUEST_ID": "proxy-id-1",
    }
    url = f"{DOCS}/launch{DEV}"
    assert api.get(url, **forwarded).status_code == 404
    settings.MEMORYADMIN_PROXY_COUNT = 1
    settings.MEMORYADMIN_TRUST_REQUEST_ID = True
    # The setting is read when the middleware is built, as a worker starts.
    api.handler.load_middleware()
    assert api.get(url, **forwarded).status_code == 404
    exported = api.post(f"/api/managed-agents/projects/acme/memory/export{DEV}", **forwarded)
    assert exported.status_code == 200
    streamed(exported)
    exported.close()

    lines = log_lines()
    path = f"{DOCS}/launch"
    first, second = [line for line in lines if line.get("request") == f"GET {path}"]
    # Without proxies the socket's address, and an id of our own.
    assert first["ip"] == "10.0.0.1"
    assert first["request_id"] != "proxy-id-1"
    assert len(first["request_id"]) == 36
    assert first["code"] == 404
    assert first["level"] == "warning"
    assert first["logger"] == "memoryadmin.request"
    # Behind one proxy the address it saw, and the id it gave.
    assert second["ip"] == "1.2.3.4"
    assert second["request_id"] == "proxy-id-1"
    export = finished(lines, "POST /api/managed-agents/projects/acme/memory/export")
    assert export["key"] == key.prefix
    ends = [line for line in lines if line["event"] == "streaming_finished"]
    assert [line["request_id"] for line in ends] == ["proxy-id-1"]
    assert ends[0]["ip"] == "1.2.3.4"


def _failing_view(request: Any) -> Any:
    raise RuntimeError("the view failed")


urlpatterns = [path("failing", _failing_view)]


@pytest.mark.urls(__name__)
def test_an_unhandled_error_logs_request_failed_once_with_its_traceback(
    log_lines: LogLines,
) -> None:
    from django.test import Client

    response = Client(raise_request_exception=False).get("/failing?secret=query")
    assert response.status_code == 500
    lines = [line for line in log_lines() if line.get("request") == "GET /failing"]
    assert [line["event"] for line in lines] == ["request_failed"]
    failed = lines[0]
    assert failed["code"] == 500
    assert failed["level"] == "error"
    assert "RuntimeError: the view failed" in failed["exception"]
    assert isinstance(failed["duration_ms"], float)
    assert len(failed["request_id"]) == 36
