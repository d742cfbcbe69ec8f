"""Cancellation (spec 004): the caller cancels an in-flight recall or tool call; its provider
attempt stops, the result says cancelled, and a cancelled non-idempotent write is recorded
as an open operation."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import httpx
import pytest
from rest_framework.test import APIClient

from memoryadmin.agents.models import ProviderOperation, Recall
from memoryadmin.memory.models import Project
from tests.helpers import (
    free_port,
    gunicorn,
    scripted_session,
    suite_database_url,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)

SESSIONS = "/api/managed-agents/sessions"
INPUT = {"type": "object", "properties": {"fact": {"type": "string"}}, "required": ["fact"]}
TOOLS = [
    {"name": "remember", "description": "Keep.", "access": "write", "input": INPUT},
    {"name": "lookup", "description": "Find.", "access": "read", "input": INPUT},
]


def post(api: APIClient, url: str, body: Any, **headers: Any) -> Any:
    return api.post(url, data=json.dumps(body), content_type="application/json", **headers)


@pytest.fixture
def session_id(api: APIClient, project: Project, scripted: Any, settings: Any) -> str:
    # Long enough that only a cancellation can end the held calls while the test waits.
    settings.MEMORYADMIN_PROVIDER_DEADLINE_SECONDS = 30
    return scripted_session(api, project, scripted, TOOLS)


def in_thread(work: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        from django.db import connection

        try:
            out.append(work())
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def wait_for_request(scripted: Any, operation: str) -> None:
    wait_until(lambda: scripted.requests(operation), f"the provider to receive the {operation}")


def call_held(
    api: APIClient, session_id: str, scripted: Any, name: str
) -> tuple[threading.Thread, list[Any]]:
    recall = post(api, f"{SESSIONS}/{session_id}/memory/recall", {"use": ["ledger"]})
    assert recall.status_code == 200, recall.json()
    scripted.tool = ["hold", (200, {"result": {"status": "stored"}})]
    body = {
        "recallId": recall.json()["recallId"],
        "callId": "call-7",
        "name": name,
        "arguments": {"fact": "Tabs."},
    }
    thread, out = in_thread(lambda: post(api, f"{SESSIONS}/{session_id}/memory/tool-calls", body))
    wait_for_request(scripted, "tool")
    return thread, out


def cancel(api: APIClient, session_id: str, **body: Any) -> Any:
    return post(api, f"{SESSIONS}/{session_id}/memory/cancel", body)


def test_a_cancelled_write_stops_says_cancelled_and_is_an_open_operation(
    api: APIClient, session_id: str, scripted: Any
) -> None:
    thread, out = call_held(api, session_id, scripted, "memory_remember")
    response = cancel(api, session_id, callId="call-7")
    assert (response.status_code, response.json()) == (202, {"status": "requested"})
    thread.join(15)
    assert not thread.is_alive(), "the cancelled call kept waiting for its provider"
    assert out[0].json() == {"result": {"status": "cancelled"}}
    operation = ProviderOperation.objects.get()
    assert (operation.kind, operation.state) == ("cancelled_write", "queued")
    assert operation.provider_operation == "call-7:ledger"


def test_a_cancelled_read_says_cancelled_and_leaves_no_operation(
    api: APIClient, session_id: str, scripted: Any
) -> None:
    thread, out = call_held(api, session_id, scripted, "memory_lookup")
    cancel(api, session_id, callId="call-7")
    thread.join(15)
    assert not thread.is_alive()
    assert out[0].json() == {"result": {"status": "cancelled"}}
    assert not ProviderOperation.objects.exists()


def test_a_cancel_during_the_wait_before_a_retry_ends_the_call_at_once(
    api: APIClient, session_id: str, scripted: Any
) -> None:
    """The provider answers 503 and asks for 5 s before the next attempt; the caller
    cancels 0.3 s later: the call ends cancelled then, and no second attempt is sent."""
    recall = post(api, f"{SESSIONS}/{session_id}/memory/recall", {"use": ["ledger"]})
    scripted.tool = [(503, {"error": {"code": "unavailable", "message": "Busy."}})]
    scripted.headers = {"Retry-After": "5"}
    body = {
        "recallId": recall.json()["recallId"],
        "callId": "call-8",
        "name": "memory_lookup",
        "arguments": {"fact": "Tabs."},
    }
    started = time.monotonic()
    thread, out = in_thread(lambda: post(api, f"{SESSIONS}/{session_id}/memory/tool-calls", body))
    wait_for_request(scripted, "tool")
    time.sleep(0.3)
    assert cancel(api, session_id, callId="call-8").status_code == 202
    cancelled = time.monotonic()
    thread.join(10)
    assert not thread.is_alive()
    assert time.monotonic() - cancelled < 1, "the wait before the retry outlasted the cancel"
    assert time.monotonic() - started < 2.5
    assert out[0].json() == {"result": {"status": "cancelled"}}
    assert len(scripted.requests("tool")) == 1
    assert not ProviderOperation.objects.exists()


def test_a_cancelled_recall_fails_as_cancelled_and_stores_nothing(
    api: APIClient, session_id: str, scripted: Any
) -> None:
    scripted.recall = ["hold", (200, {"text": "late", "sources": []})]
    body = {"use": ["ledger"], "requestId": "mreq-9"}
    thread, out = in_thread(lambda: post(api, f"{SESSIONS}/{session_id}/memory/recall", body))
    wait_for_request(scripted, "recall")
    assert cancel(api, session_id, requestId="mreq-9").status_code == 202
    thread.join(15)
    assert not thread.is_alive(), "the cancelled recall kept waiting for its provider"
    response = out[0]
    assert response.status_code == 409
    assert response.json()["error"]["details"]["reason"] == "cancelled"
    assert not Recall.objects.exists()


@pytest.mark.parametrize(
    "body", [{}, {"requestId": "a", "callId": "b"}, {"callId": ""}, {"requestId": "a b"}]
)
def test_cancel_names_exactly_one_call(api: APIClient, session_id: str, body: Any) -> None:
    response = cancel(api, session_id, **body)
    assert response.status_code == 400


def test_cancel_needs_a_write_key_of_the_sessions_project(
    client_for: Any, keys: Any, session_id: str
) -> None:
    assert cancel(client_for(keys.read_only), session_id, callId="c").status_code == 403
    assert cancel(client_for(keys.other), session_id, callId="c").status_code in {403, 404}


@pytest.mark.postgres
def test_a_client_that_goes_away_cancels_its_call_where_the_server_sees_it(
    api: APIClient, session_id: str, scripted: Any, keys: Any, tmp_path: Any
) -> None:
    """Through gunicorn, which hands the app its client's socket: the host gives up on a
    held write, the server stops the provider call and records the open operation."""
    recall = post(api, f"{SESSIONS}/{session_id}/memory/recall", {"use": ["ledger"]})
    scripted.tool = ["hold", (200, {"result": {"status": "stored"}})]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": suite_database_url(),
        "DATABASE_POOL": "0",
        "MEMORYADMIN_PROVIDER_DEADLINE_SECONDS": "30",
    }
    body = {
        "recallId": recall.json()["recallId"],
        "callId": "call-gone",
        "name": "memory_remember",
        "arguments": {"fact": "Tabs."},
    }
    with gunicorn(env) as base:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                f"{base}{SESSIONS}/{session_id}/memory/tool-calls",
                json=body,
                headers={"x-api-key": keys.owner},
                timeout=httpx.Timeout(30, read=1.0),
            )
        wait_until(lambda: scripted.abandoned == 1, "the server to stop the provider call")
        wait_until(ProviderOperation.objects.exists, "the open operation")
    operation = ProviderOperation.objects.get()
    assert (operation.kind, operation.call_id) == ("cancelled_write", "call-gone")


def test_an_unreachable_shared_cache_fails_no_call_and_refuses_a_cancel(
    api: APIClient, session_id: str, scripted: Any, settings: Any
) -> None:
    """Cancellations travel through the shared cache; while it is away (a Redis nobody
    answers on), recalls and tool calls are served as if nobody cancelled them, and a
    cancel, which cannot be passed on, is a 503 with Retry-After rather than a 202 for
    nothing."""
    settings.CACHES = {
        "default": {
            "BACKEND": "memoryadmin.core.rediscache.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/5",
        }
    }
    recall = post(
        api, f"{SESSIONS}/{session_id}/memory/recall", {"use": ["ledger"], "requestId": "mreq-1"}
    )
    assert recall.status_code == 200, recall.content
    body = {
        "recallId": recall.json()["recallId"],
        "callId": "call-1",
        "name": "memory_remember",
        "arguments": {"fact": "Tabs."},
    }
    called = post(api, f"{SESSIONS}/{session_id}/memory/tool-calls", body)
    assert called.status_code == 200, called.content
    assert called.json() == {"result": {"status": "stored"}}
    assert [b["arguments"] for b in scripted.requests("tool")] == [{"fact": "Tabs."}]
    refused = cancel(api, session_id, callId="call-1")
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "service_unavailable"
    assert refused["Retry-After"] == "5"
    assert refused.json()["error"]["details"] == {"retryAfter": 5}
