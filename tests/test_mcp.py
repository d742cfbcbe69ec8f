"""The MCP server, driven by the official SDK's own client: over HTTP (the endpoint in
this process, on a real socket, against the test database), over stdio (`manage.py
mcp` as a subprocess, on a database of its own), and as the HTTP server process
(`manage.py mcp --http`, on the test database) for its threads and its Host and Origin
checks."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager, closing, contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import httpx2
import pytest
from django.core.management import CommandError, call_command
from django.db import connections, transaction
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import ReadResourceResult, TextResourceContents

from memoryadmin.agents import mcp
from memoryadmin.agents.models import Recall, Session
from memoryadmin.agents.services import runtime
from memoryadmin.agents.services.sessions import session_end
from memoryadmin.core.errors import ToolCollision
from memoryadmin.memory.models import ApiKey, AuditEntry, Document, Project
from memoryadmin.memory.services.deployments import deployment_create
from memoryadmin.memory.services.key_usage import key_usage
from memoryadmin.memory.services.keys import api_key_create
from tests.helpers import (
    ROOT,
    Keys,
    clean_env,
    free_port,
    freeze,
    is_postgres,
    manage,
    suite_database_url,
    uvicorn_thread,
    wait_until,
    wait_until_up,
)
from tests.test_providers_client import FaultyServer, reply

QUERY = "agent=support-bot@development&memory=notes=workshop:read-write&memory=kb"


@pytest.fixture
def endpoint(transactional_db: None) -> Iterator[str]:
    with uvicorn_thread(mcp.http_app()) as base:
        yield base + "/mcp/"


@asynccontextmanager
async def connected(url: str, key: str | None) -> AsyncIterator[Client]:
    headers = {"x-api-key": key} if key else {}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


async def refusal(call: Awaitable[Any]) -> MCPError | None:
    """The error a request is answered with, or None when it succeeds."""
    try:
        await call
    except MCPError as exc:
        return exc
    return None


def text_of(result: Any) -> Any:
    return json.loads(result.content[0].text)


def resource_text(result: ReadResourceResult) -> str:
    """The text of a resource read (memory:// resources are text)."""
    contents = result.contents[0]
    assert isinstance(contents, TextResourceContents), contents
    return contents.text


def run(fn: Any) -> Any:
    return anyio.run(fn)


async def in_thread(fn: Any) -> Any:
    """The test's own database work, off its client's event loop."""

    def unit() -> Any:
        try:
            return fn()
        finally:
            connections.close_all()

    return await anyio.to_thread.run_sync(unit)


# Over HTTP.


def test_tools_are_the_runtimes_and_results_its_result_objects(
    endpoint: str, keys: Keys, workshop: Document
) -> None:
    async def scenario() -> Any:
        async with connected(f"{endpoint}?{QUERY}", keys.owner) as client:
            tools = await client.list_tools()
            resources = await client.list_resources()
            read = await client.read_resource("memory://notes")
            saved = await client.call_tool("memory_save", {"text": "v2", "memory": "notes"})
            conflict = await client.call_tool("memory_save", {"text": "v3", "memory": "notes"})
            recalled = await client.call_tool("memory_recall", {"input": "what now?"})
            again = await client.call_tool("memory_save", {"text": "v3", "memory": "notes"})
            listed = await client.call_tool("memory_list", {})
            return tools, resources, read, saved, conflict, recalled, again, listed

    tools, resources, read, saved, conflict, recalled, again, listed = run(scenario)
    session = Session.objects.get()
    assert session.idempotency_key.startswith("mcp/")
    expected = runtime.recall_create(session=session, use=["kb", "notes"])["tools"]
    assert [
        {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
        for t in tools.tools
    ] == [*expected, mcp.RECALL_DEFINITION]
    assert [(r.uri, r.name, r.description) for r in resources.resources] == [
        ("memory://kb", "kb", "Product knowledge."),
        ("memory://notes", "notes", "Workshop requirements and decisions."),
    ]
    assert read.contents[0].text == "Exercises must run on Node.js 22."
    assert saved.structured_content["status"] == "saved"
    assert text_of(saved) == saved.structured_content
    # A second save under the same reading conflicts, and says to read again.
    assert conflict.structured_content == {
        "status": "conflict",
        "text": "v2",
        "summary": "Runtime.",
    }
    assert "memory_recall" in conflict.content[1].text
    assert recalled.structured_content["memory"]["notes"]["text"] == "v2"
    assert again.structured_content["status"] == "saved"
    assert [d["id"] for d in listed.structured_content["documents"]] == []
    document = Document.objects.get(pk=workshop.pk)
    assert document.text == "v3"
    assert (document.writer_kind, document.writer_session_id) == ("agent", session.id)


def test_frozen_document_ended_session_and_bad_arguments(
    endpoint: str, keys: Keys, workshop: Document
) -> None:
    async def scenario() -> Any:
        async with connected(f"{endpoint}?{QUERY}", keys.owner) as client:
            bad = await client.call_tool("memory_save", {"memory": "notes", "txt": "x"})
            nul = await client.call_tool("memory_save", {"memory": "notes", "text": "a\x00b"})
            unknown = await client.call_tool("memory_forget", {})
            await in_thread(lambda: freeze(Document.objects.get(pk=workshop.pk)))
            frozen = await client.call_tool("memory_save", {"memory": "notes", "text": "x"})
            ended = await in_thread(end_only_session)
            closed = await client.call_tool("memory_save", {"memory": "notes", "text": "x"})
            malformed = await client.call_tool("memory_recall", {"input": 5})
            recall = await client.call_tool("memory_recall", {})
            return bad, nul, unknown, frozen, ended, closed, malformed, recall

    bad, nul, unknown, frozen, ended, closed, malformed, recall = run(scenario)
    assert bad.is_error
    assert bad.structured_content["error"]["code"] == "invalid_tool_arguments"
    # memory_recall's malformed arguments are refused as every tool's are.
    assert malformed.is_error
    assert malformed.structured_content["error"]["code"] == "invalid_tool_arguments"
    assert nul.is_error
    assert nul.structured_content["error"]["code"] == "invalid_request"
    assert unknown.is_error
    assert "Unknown tool" in unknown.structured_content["error"]["message"]
    assert frozen.structured_content == {"status": "rejected", "reason": "agent_writes_disabled"}
    assert ended.status == "ended"
    assert closed.structured_content == {"status": "rejected", "reason": "session_closed"}
    assert recall.is_error
    assert recall.structured_content["error"]["code"] == "session_closed"
    assert Document.objects.get(pk=workshop.pk).text == workshop.text


def test_a_defect_in_a_handler_is_an_internal_error_that_tells_nothing_and_serves_on(
    endpoint: str,
    keys: Keys,
    workshop: Document,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A unit that fails for no refusal (a defect) is logged with its traceback and answered
    as the API answers one: `internal_error`, with none of the exception's text (which may
    name a table, a value or a path); the server serves the next call."""
    real = runtime.tool_call
    calls = []

    def failing_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("relation memory_document at /srv/secret-path")
        return real(*args, **kwargs)

    monkeypatch.setattr(runtime, "tool_call", failing_once)

    async def scenario() -> Any:
        async with connected(f"{endpoint}?{QUERY}", keys.owner) as client:
            failed = await client.call_tool("memory_save", {"text": "v2", "memory": "notes"})
            saved = await client.call_tool("memory_save", {"text": "v2", "memory": "notes"})
            return failed, saved

    failed, saved = run(scenario)
    assert failed.is_error
    assert failed.structured_content == {
        "error": {"code": "internal_error", "message": "An internal error occurred."}
    }
    assert "secret-path" not in json.dumps(failed.model_dump(mode="json"))
    assert saved.structured_content["status"] == "saved"
    assert Document.objects.get(pk=workshop.pk).text == "v2"
    [logged] = [r for r in caplog.records if r.getMessage() == "MCP unit failed"]
    assert logged.exc_info is not None
    assert "secret-path" in str(logged.exc_info[1])


@pytest.fixture
def lookup_provider(project: Project) -> Iterator[FaultyServer]:
    """An http provider on a real socket, its `lookup` tool (a read) answering as scripted."""
    server = FaultyServer()
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    lookup = {"name": "lookup", "description": "Look up.", "access": "read", "input": schema}
    connection = {"id": "lookup", "origin": server.origin, "methods": ["POST"]}
    declaration = {
        "id": "knowledge",
        "description": "Facts.",
        "provider": {"kind": "http", "connection": connection, "tools": [lookup]},
    }
    deployment_create(
        project=project, agent="researcher", memory=[declaration], promote="development", actor="t"
    )
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("result", ["stored", ["fact:1", "fact:2"], 7, None])
def test_a_provider_result_that_is_no_object_reaches_the_model_unchanged(
    endpoint: str, keys: Keys, lookup_provider: FaultyServer, result: Any
) -> None:
    # Any JSON `result` of a provider's tool reaches the model unchanged (spec 000); MCP's
    # structured content is an object, so only an object is given as that as well.
    lookup_provider.script = [
        reply(200, {"text": "", "sources": []}),
        reply(200, {"result": result}),
        reply(200, {"result": {"facts": []}}),
    ]
    url = f"{endpoint}?agent=researcher@development&namespace=knowledge=owner"

    async def scenario() -> Any:
        async with connected(url, keys.owner) as client:
            answered = await client.call_tool("memory_lookup", {"q": "hosting"})
            then = await client.call_tool("memory_lookup", {"q": "tier"})
            return answered, then

    answered, then = run(scenario)
    assert not answered.is_error
    assert text_of(answered) == result
    assert answered.structured_content is None
    assert then.structured_content == text_of(then) == {"facts": []}
    sent = [seen.json() for seen in lookup_provider.seen]
    assert [(body["operation"], body.get("arguments")) for body in sent] == [
        ("recall", None),
        ("tool", {"q": "hosting"}),
        ("tool", {"q": "tier"}),
    ]


def test_an_input_over_the_recall_limit_is_refused_before_any_call(
    endpoint: str, keys: Keys, lookup_provider: FaultyServer
) -> None:
    """memory_recall's input is the caller's: one too long for a recall is invalid_request,
    as through the API, and the provider is not called (nor blamed)."""
    lookup_provider.script = [reply(200, {"text": "", "sources": []})]
    url = f"{endpoint}?agent=researcher@development&namespace=knowledge=owner"
    text = "x" * 65_350  # within the MCP request, beyond what a recall request carries

    async def scenario() -> Any:
        async with connected(url, keys.owner) as client:
            return await client.call_tool("memory_recall", {"input": text})

    refused = run(scenario)
    assert refused.is_error
    error = refused.structured_content["error"]
    assert error["code"] == "invalid_request"
    assert error["message"].startswith("input.text is 65350 bytes")
    assert f"at most {runtime.INPUT_TEXT_MAX_BYTES} bytes" in error["message"]
    # The session's first recall (its tools), without input: nothing else was sent.
    sent = [seen.json() for seen in lookup_provider.seen]
    assert [(body["operation"], body["input"]["text"]) for body in sent] in ([], [("recall", None)])
    assert not AuditEntry.objects.filter(action="provider.failed").exists()


def end_only_session() -> Session:
    return session_end(session=Session.objects.get(), actor="t")


# Calls of an ended session: each tool's answer (or the error's code) in any order.
ENDED_CALLS: list[tuple[str, dict[str, Any], Any]] = [
    (
        "memory_save",
        {"memory": "notes", "text": "x"},
        {"status": "rejected", "reason": "session_closed"},
    ),
    (
        "memory_read",
        {"memory": "kb", "id": "workshop"},
        {"status": "rejected", "reason": "session_closed"},
    ),
    ("memory_list", {}, {"status": "rejected", "reason": "session_closed"}),
    (
        "memory_save",
        {"memory": "elsewhere", "text": "x"},
        {"status": "rejected", "reason": "not_bound", "bound": ["notes"]},
    ),
    ("memory_save", {"memory": "notes", "txt": "x"}, "invalid_tool_arguments"),
    ("memory_forget", {}, "invalid_request"),
    ("memory_recall", {}, "session_closed"),
]


@pytest.mark.parametrize("recalled", [False, True], ids=["before-any-recall", "after-a-recall"])
def test_an_ended_sessions_tool_calls_are_rejected_as_closed_before_and_after_a_recall(
    endpoint: str, keys: Keys, workshop: Document, recalled: bool
) -> None:
    async def scenario() -> Any:
        async with connected(f"{endpoint}?{QUERY}", keys.owner) as client:
            if recalled:
                await client.list_tools()  # reads memory: a recall
            else:
                await client.list_resources()  # opens the session without reading memory
            await in_thread(end_only_session)
            tools = await client.list_tools()
            answers = [await client.call_tool(name, args) for name, args, _ in ENDED_CALLS]
            return tools, answers

    tools, answers = run(scenario)
    session = Session.objects.get()
    assert session.status == "ended"
    expected_tools = ["memory_save", "memory_list", "memory_read", "memory_recall"]
    assert [t.name for t in tools.tools] == expected_tools
    got = [
        a.structured_content["error"]["code"] if a.is_error else a.structured_content
        for a in answers
    ]
    assert got == [expected for _, _, expected in ENDED_CALLS]
    assert [a.is_error for a in answers] == [isinstance(e, str) for _, _, e in ENDED_CALLS]
    # Nothing was written, and no recall was stored for the ended session.
    assert Document.objects.get(pk=workshop.pk).text == workshop.text
    assert Recall.objects.count() == (1 if recalled else 0)


def test_one_session_per_mcp_session_and_a_named_one_rejoins(
    endpoint: str, keys: Keys, workshop: Document
) -> None:
    name = "topic 7/" + "x" * 244  # the longest name a session's key holds

    async def scenario() -> None:
        for url in [f"{endpoint}?{QUERY}"] * 2 + [f"{endpoint}?{QUERY}&session={name}"] * 2:
            async with connected(url, keys.owner) as client:
                await client.list_tools()

    run(scenario)
    found = sorted(Session.objects.values_list("idempotency_key", flat=True))
    assert len(found) == 3
    assert f"mcp/{name}" in found


def test_an_mcp_session_answers_only_the_key_that_opened_it(
    endpoint: str, keys: Keys, project: Project, workshop: Document
) -> None:
    second = api_key_create(project_id=project.id)[1]

    async def scenario() -> MCPError | None:
        async with (
            httpx2.AsyncClient(headers={"x-api-key": keys.owner}) as http,
            Client(streamable_http_client(f"{endpoint}?{QUERY}", http_client=http)) as client,
        ):
            await client.list_tools()
            http.headers["x-api-key"] = second
            return await refusal(client.call_tool("memory_save", {"memory": "notes", "text": "x"}))

    refused = run(scenario)
    assert refused is not None
    assert str(refused) == "Session not found"  # as for a session that does not exist
    assert Document.objects.get(pk=workshop.pk).text == workshop.text


def test_an_mcp_session_belongs_to_its_key_from_its_creation(
    endpoint: str, keys: Keys, project: Project, workshop: Document
) -> None:
    """Between `initialize` and the session's first call another key that knows the
    Mcp-Session-Id cannot claim it: it is told what an unknown session is told."""
    second = api_key_create(project_id=project.id)[1]
    accept = {"accept": "application/json, text/event-stream"}
    opened = initialize(endpoint, keys.owner)
    assert opened.status_code == 200
    sid = opened.headers["mcp-session-id"]

    def post(key: str, session_id: str, body: dict[str, Any], query: str = QUERY) -> httpx.Response:
        headers = {"x-api-key": key, "mcp-session-id": session_id, **accept}
        return httpx.post(f"{endpoint}?{query}", json=body, headers=headers)

    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert post(keys.owner, sid, done).status_code == 202
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    unknown = post(second, "f" * 32, listing)
    assert unknown.status_code == 404
    # Another key, then the same key with another URL: each as for an unknown session.
    for key, query in [(second, QUERY), (keys.owner, QUERY + "&session=beta")]:
        claimed = post(key, sid, listing, query)
        assert (claimed.status_code, claimed.text) == (unknown.status_code, unknown.text)
    assert not Session.objects.exists()
    listed = post(keys.owner, sid, listing)
    assert listed.status_code == 200
    assert "memory_save" in listed.text
    session = Session.objects.get()
    assert session.idempotency_key == f"mcp/{sid}"
    assert AuditEntry.objects.filter(actor=f"key:{keys.owner[:12]}").exists()
    # Nor in the protocol's era without sessions, where the SDK checks no opener: with
    # or without the session's id, a request there reaches no session.
    save = {"name": "memory_save", "arguments": {"memory": "notes", "text": "claimed"}}
    modern = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    for ids in ({"mcp-session-id": sid}, {}):
        headers = {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call"}
        headers |= {"mcp-name": "memory_save", "x-api-key": second, **accept, **ids}
        body = {"jsonrpc": "2.0", "id": 3, "method": "tools/call"}
        body["params"] = {**save, "_meta": modern}
        elsewhere = httpx.post(f"{endpoint}?{QUERY}", json=body, headers=headers)
        assert "Use initialize." in elsewhere.text, elsewhere.text
    assert Document.objects.get(pk=workshop.pk).text == workshop.text
    assert list(Session.objects.all()) == [session]
    assert not AuditEntry.objects.filter(actor=f"key:{second[:12]}").exists()


def test_an_mcp_session_answers_only_the_session_name_that_opened_it(
    endpoint: str, keys: Keys, workshop: Document
) -> None:
    async def scenario() -> MCPError | None:
        async with (
            httpx2.AsyncClient(headers={"x-api-key": keys.owner}) as http,
            Client(
                streamable_http_client(f"{endpoint}?{QUERY}&session=alpha", http_client=http)
            ) as client,
        ):
            await client.list_tools()

            # The same Mcp-Session-Id, the same key, another session's name in the URL.
            async def renamed(request: httpx2.Request) -> None:
                request.url = request.url.copy_set_param("session", "beta")

            http.event_hooks["request"].append(renamed)
            return await refusal(client.call_tool("memory_save", {"memory": "notes", "text": "x"}))

    refused = run(scenario)
    assert refused is not None
    assert str(refused) == "Session not found"
    assert list(Session.objects.values_list("idempotency_key", flat=True)) == ["mcp/alpha"]
    assert Document.objects.get(pk=workshop.pk).text == workshop.text


def test_bodies_over_the_api_limit_are_refused(endpoint: str, keys: Keys) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"x": "a" * 70_000}}
    response = httpx.post(f"{endpoint}?{QUERY}", json=body, headers={"x-api-key": keys.owner})
    assert response.status_code == 413
    assert not Session.objects.exists()


def test_a_body_in_a_content_coding_is_refused(endpoint: str, keys: Keys) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    headers = {"x-api-key": keys.owner, "content-encoding": "gzip"}
    response = httpx.post(f"{endpoint}?{QUERY}", json=body, headers=headers)
    assert response.status_code == 415
    assert response.headers["accept-encoding"] == "identity"
    assert response.json()["error"] == {
        "code": "unsupported_media_type",
        "message": "Content-Encoding 'gzip' is not accepted: send the body uncompressed.",
    }
    assert not Session.objects.exists()


def test_a_key_over_its_rate_is_refused_as_on_the_api_and_shares_its_window(
    endpoint: str, keys: Keys, client_for: Any, settings: Any
) -> None:
    settings.MEMORYADMIN_API_RATE = "3/minute"
    assert [initialize(endpoint, keys.owner).status_code for _ in range(2)] == [200, 200]
    assert client_for(keys.owner).get("/api/managed-agents/projects/acme").status_code == 200
    refused = initialize(endpoint, keys.owner)
    assert refused.status_code == 429
    retry_after = int(refused.headers["retry-after"])
    assert 1 <= retry_after <= 60
    error = refused.json()["error"]
    assert error["code"] == "rate_limited"
    assert error["message"].startswith("This API key is over its request rate (3/minute)")
    assert error["details"] == {"retryAfter": retry_after}
    # The API refuses it too, and another key of the project is served.
    assert client_for(keys.owner).get("/api/managed-agents/projects/acme").status_code == 429
    assert initialize(endpoint, api_key_create(project_id="acme")[1]).status_code == 200


def test_a_projects_keys_together_are_limited_on_mcp_too(
    endpoint: str, keys: Keys, client_for: Any, settings: Any
) -> None:
    settings.MEMORYADMIN_PROJECT_API_RATE = "3/minute"
    assert initialize(endpoint, keys.owner).status_code == 200
    assert client_for(keys.read_only).get("/api/managed-agents/projects/acme").status_code == 200
    assert initialize(endpoint, keys.owner).status_code == 200
    refused = initialize(endpoint, keys.owner)
    assert refused.status_code == 429
    assert refused.json()["error"]["message"].startswith(
        "This project's API keys together are over their request rate (3/minute)"
    )
    assert "retry-after" in refused.headers
    assert client_for(keys.other).get("/api/managed-agents/projects/globex").status_code == 200


def test_mcp_requests_count_in_the_keys_usage_by_kind_as_api_requests_do(
    endpoint: str, keys: Keys, settings: Any
) -> None:
    settings.MEMORYADMIN_API_RATE = "4/minute"
    assert initialize(endpoint, keys.owner).status_code == 200
    # Refused by the door (a query it does not take), then by the SDK (an MCP session it
    # does not know), then over the key's rate.
    unknown = httpx.post(
        f"{endpoint}?{QUERY}&colour=red",
        json=INITIALIZE,
        headers={"x-api-key": keys.owner, "accept": "application/json, text/event-stream"},
    )
    assert unknown.status_code == 400
    assert unknown.json()["error"]["message"] == "Unknown query parameters: colour."
    lost = initialize(endpoint, keys.owner, **{"mcp-session-id": "f" * 32})
    assert lost.status_code == 404
    assert initialize(endpoint, keys.owner).status_code == 200
    assert initialize(endpoint, keys.owner).status_code == 429
    key = ApiKey.objects.get(prefix=keys.owner[:12])
    now = key_usage(keys=[key])[key.pk][-1]
    assert (now.requests, now.errors, now.throttled) == (5, 2, 1)
    other = ApiKey.objects.get(prefix=keys.read_only[:12])
    assert key_usage(keys=[other])[other.pk][-1].requests == 0


@pytest.mark.parametrize(
    ("who", "query", "status", "code"),
    [
        (None, QUERY, 401, "unauthorized"),
        ("bad", QUERY, 401, "unauthorized"),
        ("other", QUERY + "&project=acme", 403, "forbidden"),
        ("read_only", QUERY, 403, "forbidden"),
        ("all_projects", QUERY, 400, "invalid_request"),
        ("all_projects", QUERY + "&project=nope", 404, "project_not_found"),
        ("owner", "memory=notes=workshop", 400, "invalid_request"),
        ("owner", QUERY + "&colour=red", 400, "invalid_request"),
        ("owner", QUERY + "&agent=support-bot@development", 400, "invalid_request"),
        ("owner", QUERY + "&memory=notes=other", 400, "invalid_request"),
        ("owner", QUERY.replace("support-bot", "a%00b"), 400, "invalid_request"),
        # A session's name the session's Idempotency-Key ("mcp/" and it) cannot hold.
        ("owner", QUERY + "&session=" + "a" * 253, 400, "invalid_request"),
        ("owner", QUERY + "&session=", 400, "invalid_request"),
        ("owner", QUERY + "&session=caf%C3%A9", 400, "invalid_request"),
        ("owner", QUERY + "&session=a%0Ab", 400, "invalid_request"),
    ],
)
def test_refused_before_any_session(
    endpoint: str, keys: Keys, workshop: Document, who: Any, query: str, status: int, code: str
) -> None:
    key = {"bad": "mak_nope", None: None}[who] if who in ("bad", None) else getattr(keys, who)
    headers = {"x-api-key": key} if key else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    response = httpx.post(f"{endpoint}?{query}", json=body, headers=headers)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    if query.count("agent=") > 1:
        assert response.json()["error"] == {
            "code": "invalid_request",
            "message": "agent must be given once.",
            "details": {"field": "agent"},
        }
    if "session=" in query:
        assert response.json()["error"] == {
            "code": "invalid_request",
            "message": "session is 1-252 printable ASCII characters.",
            "details": {"field": "query.session"},
        }
    assert not Session.objects.exists()


def test_a_binding_refused_at_admission_fails_the_mcp_request(
    endpoint: str, keys: Keys, workshop: Document
) -> None:
    async def scenario() -> MCPError | None:
        url = f"{endpoint}?agent=support-bot@development&memory=notes=missing"
        async with connected(url, keys.owner) as client:
            return await refusal(client.list_tools())

    refused = run(scenario)
    assert refused is not None
    assert "invalid_memory_binding" in str(refused)
    assert "does not exist" in str(refused)
    assert not Session.objects.exists()


def test_a_runtime_tool_named_memory_recall_is_refused_not_shadowed() -> None:
    """Admission refuses a declared tool named memory_recall (tests/test_runtime_http.py);
    a session admitted while the name was free lists no tools rather than serving one of
    the two, and memory_recall is always the server's own."""
    theirs = {"name": "memory_recall", "description": "A provider's.", "inputSchema": {}}
    door = mcp.MemoryDoor(
        session_id="ses_x", project_id="acme", recall={"recallId": "r", "tools": [theirs]}
    )
    with pytest.raises(ToolCollision, match="collides with the MCP server's own"):
        door.tools()
    plain = mcp.MemoryDoor(
        session_id="ses_x", project_id="acme", recall={"recallId": "r", "tools": []}
    )
    assert plain.tools() == [mcp.RECALL_DEFINITION]


# Over stdio: manage.py mcp as the SDK's stdio client starts it.


@pytest.fixture(scope="module")
def stdio_env(tmp_path_factory: pytest.TempPathFactory, migrated_sqlite: Any) -> dict[str, str]:
    """A SQLite database of their own for the server subprocesses, with the demo set up."""
    var = tmp_path_factory.mktemp("my-notes")
    env = clean_env(
        DATABASE_URL=f"sqlite:///{migrated_sqlite(var / 'db.sqlite3')}",
        MEMORYADMIN_VAR_DIR=str(var),
        MEMORYADMIN_DEV_SECRETS="1",
        MEMORYADMIN_PROVIDER_ALLOW="127.0.0.0/8",
    )
    done = manage("demo", env=env)
    assert done.returncode == 0, done.stderr
    return env


def readme_config() -> dict[str, Any]:
    """The MCP client configuration of the README, pointed at this checkout."""
    text = (ROOT / "README.md").read_text()
    block = text.split("<!-- mcp-config:start -->", 1)[1].split("<!-- mcp-config:end -->")[0]
    raw = block.split("```json\n", 1)[1].split("```", 1)[0]
    config: dict[str, Any] = json.loads(raw.replace("/path/to/memoryadmin", str(ROOT)))
    return config["mcpServers"]["memoryadmin"]


def stdio_client(env: dict[str, str]) -> Client:
    """The SDK's client, starting the server as the README configures it (from elsewhere)."""
    config = readme_config()
    server = StdioServerParameters(
        command=config["command"], args=config["args"], env={**env, **config["env"]}, cwd="/"
    )
    return Client(server)


def rows(env: dict[str, str], model: Any, *columns: str) -> list[tuple[Any, ...]]:
    """Rows of a model's table in the subprocesses' database."""
    path = env["DATABASE_URL"].removeprefix("sqlite:///")
    with closing(sqlite3.connect(path)) as db:
        return db.execute(f"SELECT {', '.join(columns)} FROM {model._meta.db_table}").fetchall()


@pytest.mark.parametrize("key", ["k" * 249, "clé"])
def test_stdio_creates_no_document_for_a_key_it_refuses(project: Project, key: str) -> None:
    with pytest.raises(CommandError, match="--idempotency-key: idempotency keys are 1-248"):
        call_command(
            "mcp", "--project", "acme", "--agent", "support-bot", "--memory", "notes=topic",
            "--create-document", "--idempotency-key", key,
        )  # fmt: skip
    assert not Document.objects.exists()
    assert not Session.objects.exists()


def test_stdio_serves_one_session_that_a_restart_rejoins(stdio_env: dict[str, str]) -> None:
    async def first() -> Any:
        async with stdio_client(stdio_env) as client:
            tools = await client.list_tools()
            read = await client.read_resource("memory://notes")
            saved = await client.call_tool("memory_save", {"text": "one"})
            conflict = await client.call_tool("memory_save", {"text": "two"})
            bad = await client.call_tool("memory_save", {"text": 2})
            return tools, read, saved, conflict, bad

    tools, read, saved, conflict, bad = run(first)
    assert [t.name for t in tools.tools] == ["memory_save", "memory_recall"]
    assert tools.tools[0].input_schema["required"] == ["text"]
    assert read.contents[0].text == ""
    assert saved.structured_content["status"] == "saved"
    assert conflict.structured_content == {"status": "conflict", "text": "one", "summary": ""}
    assert bad.is_error
    assert bad.structured_content["error"]["code"] == "invalid_tool_arguments"

    [(session_id,)] = rows(stdio_env, Session, "id")
    assert ("my-notes", "one") in rows(stdio_env, Document, "doc_id", "text")
    frozen = manage(*["memory", "--project", "demo", "freeze", "notes", "my-notes"], env=stdio_env)
    assert frozen.returncode == 0, frozen.stderr

    async def second() -> Any:
        async with stdio_client(stdio_env) as client:
            refused = await client.call_tool("memory_save", {"text": "three"})
            ended = manage("session", "end", session_id, env=stdio_env)
            assert ended.returncode == 0, ended.stderr
            closed = await client.call_tool("memory_save", {"text": "three"})
            return refused, closed

    refused, closed = run(second)
    assert refused.structured_content == {"status": "rejected", "reason": "agent_writes_disabled"}
    assert closed.structured_content == {"status": "rejected", "reason": "session_closed"}
    # The restart rejoined the one session; an ended one is not served again.
    assert rows(stdio_env, Session, "id", "status") == [(session_id, "ended")]
    config = readme_config()
    again = subprocess.run(
        [config["command"], *config["args"]],
        cwd=ROOT,
        env=stdio_env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert again.returncode == 7, again.stderr
    assert "has ended; use a new key" in again.stderr


def test_stdio_answers_a_database_it_cannot_open_as_refusals_and_serves_again(
    tmp_path: Path, migrated_sqlite: Any
) -> None:
    """While its database cannot be opened, each request is refused with the API's 503
    envelope (a tool call an error result, a read an MCP error), where they were answered
    the driver's message under code 0; nothing was written, and once the database is back
    the same connection saves under the recall it read before."""
    folder = tmp_path / "db"
    folder.mkdir()
    env = clean_env(
        DATABASE_URL=f"sqlite:///{migrated_sqlite(folder / 'db.sqlite3')}",
        MEMORYADMIN_VAR_DIR=str(tmp_path),
        MEMORYADMIN_DEV_SECRETS="1",
        MEMORYADMIN_PROVIDER_ALLOW="127.0.0.0/8",
    )
    done = manage("demo", env=env)
    assert done.returncode == 0, done.stderr
    away = tmp_path / "away"

    async def scenario() -> Any:
        async with stdio_client(env) as client:
            await client.read_resource("memory://notes")
            folder.rename(away)
            try:
                saved = await client.call_tool("memory_save", {"text": "while away"})
                read = await refusal(client.read_resource("memory://notes"))
            finally:
                away.rename(folder)
            again = await client.call_tool("memory_save", {"text": "back"})
            return saved, read, again

    saved, read, again = run(scenario)
    unavailable = {
        "error": {
            "code": "service_unavailable",
            "message": "The database is unavailable; retry in 5 seconds.",
            "details": {"retryAfter": 5},
        }
    }
    assert saved.is_error
    assert saved.structured_content == unavailable
    assert isinstance(read, MCPError)
    assert read.message.startswith("service_unavailable: ")
    assert read.data == unavailable
    assert again.structured_content["status"] == "saved"
    assert ("my-notes", "back") in rows(env, Document, "doc_id", "text")


# The HTTP server process (`manage.py mcp --http`) on the suite's database: projects are
# served at once, each within its share of the handler threads; Host and Origin checked.

SCRIBE = "agent=scribe@development&namespace=ledger=team:read-write"
HELD_TEXT = "Kept by the scripted provider."


@contextmanager
def mcp_process(**env: str) -> Iterator[str]:
    """`manage.py mcp --http` on a free loopback port with `env` on top of the suite's
    settings and database; yields the endpoint's URL, stops the process on exit."""
    port = free_port()
    full = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": suite_database_url(),
        "DATABASE_POOL": "0",
        **env,
    }
    process = subprocess.Popen(
        [sys.executable, "manage.py", "mcp", "--http", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=full,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/mcp/"
    try:
        wait_until_up(url, process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def slow_project(other_project: Project, scripted: Any) -> Project:
    """Project "globex" with agent "scribe", whose resource "ledger" is the scripted
    provider; its recall is held until the test releases it."""
    deployment_create(
        project=other_project,
        agent="scribe",
        memory=[scripted.declaration([])],
        promote="development",
        actor="t",
    )
    scripted.recall = ["hold", (200, {"text": HELD_TEXT, "sources": []})]
    return other_project


def read_in_thread(url: str, key: str, uri: str) -> tuple[threading.Thread, list[Any]]:
    """Reads `uri` over MCP in a thread of its own; the list gets the text or the error."""
    out: list[Any] = []

    async def read() -> None:
        async with connected(url, key) as client:
            try:
                out.append(resource_text(await client.read_resource(uri)))
            except MCPError as exc:
                out.append(exc)

    thread = threading.Thread(target=run, args=(read,), daemon=True)
    thread.start()
    return thread, out


# "At once", for a new session and its calls while another project's provider call is held:
# well under a second on a quiet machine, and a few on one busy with the rest of the suite
# (CI runs a worker per core), where a bound of 1 s failed. A call that waited for the held
# one would wait for it to end: the provider deadline (10 s), and the held call is still
# open when these are checked.
AT_ONCE = 5.0


def timed_read(url: str, key: str, uri: str) -> tuple[float, str]:
    async def read() -> str:
        async with connected(url, key) as client:
            return resource_text(await client.read_resource(uri))

    started = time.monotonic()
    text = run(read)
    return time.monotonic() - started, text


def test_a_slow_provider_of_one_project_holds_up_no_other_project(
    transactional_db: None, keys: Keys, workshop: Document, slow_project: Project, scripted: Any
) -> None:
    with mcp_process(MEMORYADMIN_MCP_THREADS="4") as url:
        slow, out = read_in_thread(f"{url}?{SCRIBE}", keys.other, "memory://ledger")
        wait_until(lambda: scripted.requests("recall"), "globex's recall to reach its provider")
        # While globex's provider holds its recall, acme reads its document at once.
        elapsed, text = timed_read(f"{url}?{QUERY}", keys.owner, "memory://notes")
        assert text == workshop.text
        assert elapsed < AT_ONCE, f"acme waited {elapsed:.1f} s"
        assert slow.is_alive()
        assert not out
        scripted.release.set()
        slow.join(15)
    assert out == [HELD_TEXT]


def test_a_project_past_its_share_is_refused_at_once_and_others_are_served(
    transactional_db: None, keys: Keys, workshop: Document, slow_project: Project, scripted: Any
) -> None:
    """Two handler threads, so each project's share is one. globex's first session reads
    memory at once; a second session's read is then held by the provider: globex is at its
    share, and the first session's calls and a third session are refused at once."""
    early = {"text": "Early.", "sources": []}
    scripted.recall = [(200, early), "hold", (200, {"text": HELD_TEXT, "sources": []})]

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with connected(f"{url}?{SCRIBE}", keys.other) as first:
            seen["tools"] = await first.list_tools()
            seen["held"] = read_in_thread(f"{url}?{SCRIBE}", keys.other, "memory://ledger")
            await anyio.to_thread.run_sync(
                wait_until, lambda: len(scripted.requests("recall")) == 2, "the held recall"
            )
            started = time.monotonic()
            seen["recall"] = await first.call_tool("memory_recall", {})
            seen["read"] = await refusal(first.read_resource("memory://ledger"))
            async with connected(f"{url}?{SCRIBE}&session=third", keys.other) as third:
                seen["third"] = await refusal(third.list_tools())
            seen["refused in"] = time.monotonic() - started
            async with connected(f"{url}?{QUERY}", keys.owner) as acme:
                started = time.monotonic()
                seen["acme"] = resource_text(await acme.read_resource("memory://notes"))
                seen["acme in"] = time.monotonic() - started
        return seen

    with mcp_process(MEMORYADMIN_MCP_THREADS="2") as url:
        seen = run(scenario)
        held, out = seen["held"]
        assert held.is_alive()
        assert not out
        scripted.release.set()
        held.join(15)
    assert out == [HELD_TEXT]
    assert [t.name for t in seen["tools"].tools] == ["memory_recall"]
    assert seen["refused in"] < AT_ONCE, f"globex's refusals took {seen['refused in']:.1f} s"
    assert seen["recall"].is_error
    error = seen["recall"].structured_content["error"]
    assert error["code"] == "rate_limited"
    assert "share of this MCP server's threads (1 of 1)" in error["message"]
    for refused in (seen["read"], seen["third"]):
        assert isinstance(refused, MCPError)
        assert refused.data["error"]["code"] == "rate_limited"
        assert refused.data["error"]["details"]["reason"] == "concurrency_limit"
        assert 1 <= refused.data["error"]["details"]["retryAfter"] <= 10
    # acme still found its thread at once.
    assert seen["acme"] == workshop.text
    assert seen["acme in"] < AT_ONCE, f"acme waited {seen['acme in']:.1f} s"
    # The third session was never opened; the provider saw the two admitted recalls only.
    keys_of = Session.objects.filter(project=slow_project).values_list("idempotency_key")
    assert len(keys_of) == 2
    assert ("mcp/third",) not in keys_of
    assert len(scripted.requests("recall")) == 2


@pytest.mark.skipif(not is_postgres(), reason="statement_timeout is PostgreSQL's")
def test_a_tool_call_past_the_statement_timeout_is_a_503_result_that_changes_nothing(
    transactional_db: None, keys: Keys, workshop: Document
) -> None:
    """A save waiting on a row another transaction holds runs past the process's
    statement_timeout: its answer is the API's 503 envelope as an error result, where it
    was the database's message (naming the table) under code 0. Nothing was saved, and
    the connection's recall still holds: the retry saves."""
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                Document.objects.select_for_update().get(pk=workshop.pk)
                locked.set()
                release.wait(60)
        finally:
            connections.close_all()

    async def scenario() -> Any:
        async with connected(f"{url}?{QUERY}", keys.owner) as client:
            await client.read_resource("memory://notes")
            holder = threading.Thread(target=hold)
            holder.start()
            try:
                await anyio.to_thread.run_sync(locked.wait, 30)
                saved = await client.call_tool("memory_save", {"text": "Node.js 24."})
                unchanged = await in_thread(lambda: Document.objects.get(pk=workshop.pk))
            finally:
                release.set()
                await anyio.to_thread.run_sync(holder.join)
            again = await client.call_tool("memory_save", {"text": "Node.js 24."})
            return saved, unchanged, again

    with mcp_process(MEMORYADMIN_STATEMENT_TIMEOUT_SECONDS="1") as url:
        saved, unchanged, again = run(scenario)
    assert saved.is_error
    assert saved.structured_content == {
        "error": {
            "code": "service_unavailable",
            "message": "The request took too long; retry in 5 seconds.",
            "details": {"retryAfter": 5},
        }
    }
    assert (unchanged.text, unchanged.revision) == (workshop.text, workshop.revision)
    assert again.structured_content["status"] == "saved"
    assert Document.objects.get(pk=workshop.pk).text == "Node.js 24."


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


def initialize(url: str, key: str, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{url}?{QUERY}",
        json=INITIALIZE,
        headers={
            "x-api-key": key,
            "accept": "application/json, text/event-stream",
            **headers,
        },
    )


def test_host_and_origin_are_checked_against_the_allowed_hosts(
    transactional_db: None, keys: Keys, workshop: Document
) -> None:
    env = {
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,memory.example.com",
        "DJANGO_CSRF_TRUSTED_ORIGINS": "https://app.example.com",
    }
    with mcp_process(**env) as url:
        port = url.split(":")[2].split("/")[0]
        refused = {
            "host": initialize(url, keys.owner, host="evil.example"),
            "host and port": initialize(url, keys.owner, host=f"evil.example:{port}"),
            "origin": initialize(url, keys.owner, origin="http://evil.example"),
            "origin of another port": initialize(
                url, keys.owner, origin="https://app.example.com:8443"
            ),
            "no key, foreign host": initialize(url, "", host="evil.example"),
        }
        statuses = {name: response.status_code for name, response in refused.items()}
        assert statuses == {
            "host": 421,
            "host and port": 421,
            "origin": 403,
            "origin of another port": 403,
            "no key, foreign host": 421,
        }
        assert refused["host"].json()["error"]["code"] == "misdirected_request"
        assert refused["origin"].json()["error"]["code"] == "forbidden"
        assert not Session.objects.exists()
        allowed = [
            initialize(url, keys.owner),
            initialize(url, keys.owner, host="memory.example.com"),
            initialize(url, keys.owner, origin=f"http://127.0.0.1:{port}"),
            initialize(
                url, keys.owner, host="memory.example.com", origin="https://memory.example.com"
            ),
            initialize(url, keys.owner, origin="https://app.example.com"),
        ]
        assert [r.status_code for r in allowed] == [200] * 5, [r.text for r in allowed]
        assert all(r.headers["mcp-session-id"] for r in allowed)


def test_allowed_hosts_the_endpoint_cannot_check_stop_it_from_starting(
    transactional_db: None,
) -> None:
    env = clean_env(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DATABASE_URL=suite_database_url(),
        DJANGO_ALLOWED_HOSTS=".example.com",
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "mcp", "--http", f"127.0.0.1:{free_port()}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 6, done.stderr
    assert "'.example.com'" in done.stderr


def test_the_server_reports_the_product_version_and_tool_descriptions_end_once(
    endpoint: str, keys: Keys, workshop: Document
) -> None:
    import tomllib

    from memoryadmin import __version__

    async def scenario() -> Any:
        async with connected(f"{endpoint}?{QUERY}", keys.owner) as client:
            return client.server_info, await client.list_tools()

    info, tools = run(scenario)
    with open(os.path.join(os.path.dirname(__file__), "..", "pyproject.toml"), "rb") as file:
        assert __version__ == tomllib.load(file)["project"]["version"]
    assert info is not None
    assert info.version == __version__
    # Resource descriptions end in their own full stop: the tool's gets no second one.
    for tool in tools.tools:
        assert ".." not in (tool.description or ""), tool.description
        assert (tool.description or "").endswith("."), tool.description


def test_a_database_it_cannot_use_answers_503_as_the_api_does(tmp_path: Path) -> None:
    """The endpoint's key look-up on a database it cannot open (here a SQLite file whose
    folder does not exist) answered Starlette's plain-text 500."""
    missing = tmp_path / "missing" / "db.sqlite3"
    with mcp_process(DATABASE_URL=f"sqlite:///{missing}") as url:
        body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
        response = httpx.post(f"{url}?{QUERY}", json=body, headers={"x-api-key": "mak_x"})
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"] == "5"
    assert response.json() == {
        "error": {
            "code": "service_unavailable",
            "message": "The database is unavailable; retry in 5 seconds.",
            "details": {"retryAfter": 5},
        }
    }
    assert not missing.parent.exists()
