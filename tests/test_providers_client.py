"""The host client against a deliberately faulty provider over real sockets.

The server below answers each request with the next scripted behaviour and
records when each attempt arrived and what it carried, so the tests can check
attempts, their spacing, and that a request was never repeated.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from memoryadmin.core.errors import InvalidToolArguments, ToolNotPermitted
from memoryadmin.memory.models import AuditEntry, Project, Resource
from memoryadmin.memory.services.deployments import deployment_create, resource_get
from memoryadmin.providers import client, wire
from memoryadmin.providers.client import ProviderFailure, provider_recall, provider_tool
from memoryadmin.providers.services.secrets import secret_set
from tests.loopback import LoopbackServer

TOKEN = "tok_faulty-server-secret"
PARTITION = "ocmem_v1_test-partition"
INPUT = {
    "type": "object",
    "properties": {"q": {"type": "string", "maxLength": 20}},
    "required": ["q"],
    "additionalProperties": False,
}
GOOD_RECALL = {"text": "Use the free tier.", "sources": [{"id": "fact:1"}], "cursor": "c-1"}
# Retry pauses for tests about what is retried, not when: the specified pauses
# (250 ms, then 1 s) are asserted by the tests that time them.
NO_WAIT = (0.01, 0.01)


@dataclass
class Seen:
    at: float
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Action = Callable[[BaseHTTPRequestHandler], None]


def reply(
    status: int,
    body: Any = None,
    *,
    raw: bytes | None = None,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
    length: bool = True,
) -> Action:
    payload = raw if raw is not None else json.dumps(body).encode()

    def act(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        if length:
            handler.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(payload)

    return act


def hang_up() -> Action:
    """Closes the connection without answering: a transport failure."""

    def act(handler: BaseHTTPRequestHandler) -> None:
        handler.close_connection = True

    return act


def stall(seconds: float, then: Action) -> Action:
    def act(handler: BaseHTTPRequestHandler) -> None:
        server: FaultyServer = handler.server  # type: ignore[assignment]
        server.release.wait(seconds)
        then(handler)

    return act


class FaultyServer(LoopbackServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.script: list[Action] = []
        self.seen: list[Seen] = []
        self.release = threading.Event()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def gaps(self) -> list[float]:
        return [b.at - a.at for a, b in zip(self.seen, self.seen[1:], strict=False)]


class Handler(BaseHTTPRequestHandler):
    server: FaultyServer
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.seen.append(Seen(time.monotonic(), self.path, dict(self.headers), body))
        script = self.server.script
        action = script.pop(0) if len(script) > 1 else script[0]
        # The client may be gone already (a deadline passed); that is the point.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            action(self)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[FaultyServer]:
    server = FaultyServer()
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def short_deadline(settings: Any) -> float:
    """A deadline short enough to wait for, long enough for the request to arrive on a busy
    machine; the default (10 s) is asserted on its own."""
    settings.MEMORYADMIN_PROVIDER_DEADLINE_SECONDS = 2.0
    return 2.0


TOOLS = [
    {"name": "lookup", "description": "Read.", "access": "read", "input": INPUT},
    {"name": "note", "description": "Write once.", "access": "write", "input": INPUT},
    {
        "name": "save",
        "description": "Idempotent write.",
        "access": "write",
        "idempotent": True,
        "input": INPUT,
    },
]


@pytest.fixture
def resource(project: Project, server: FaultyServer) -> Resource:
    return declared(project, server.origin)


def declared(project: Project, origin: str) -> Resource:
    """The provider of these tests, deployed at `origin`, its token bound to it."""
    declaration = {
        "id": "knowledge",
        "description": "Facts.",
        "provider": {
            "kind": "http",
            "connection": {
                "id": "faulty",
                "origin": origin,
                "methods": ["POST"],
                "pathPrefix": "/oc-memory",
                "headers": {
                    "Authorization": {"secret": "MEMORY_TOKEN", "scheme": "Bearer"},
                    "X-Tenant": "acme",
                },
            },
            "path": "/oc-memory/v1",
            "maxBytes": 64,
            "tools": TOOLS,
        },
    }
    deployment_create(
        project=project, agent="researcher", memory=[declaration], promote="development", actor="t"
    )
    secret_set(
        project=project,
        environment="development",
        name="MEMORY_TOKEN",
        value=TOKEN,
        origins=[origin],
        actor="t",
    )
    return resource_get(project=project, environment="development", resource_id="knowledge")


def recall(resource: Resource, **kwargs: Any) -> client.RecallOutcome:
    return provider_recall(
        resource=resource,
        partition=PARTITION,
        access="read-write",
        operation_id="mrq_1:knowledge",
        input_text="What hosting?",
        **kwargs,
    )


def tool(resource: Resource, name: str, **kwargs: Any) -> client.ToolOutcome:
    kwargs.setdefault("arguments", {"q": "hosting"})
    kwargs.setdefault("cursor", "c-1")
    return provider_tool(
        resource=resource,
        tool=name,
        partition=PARTITION,
        access="read-write",
        operation_id="toolcall_1:knowledge",
        **kwargs,
    )


def failure(resource: Resource, **kwargs: Any) -> ProviderFailure:
    """The failure of a recall; what its caller sees is generic, whatever went wrong."""
    with pytest.raises(ProviderFailure) as raised:
        recall(resource, **kwargs)
    failed = raised.value
    assert failed.message == wire.failure_message("knowledge", retryable=failed.retryable)
    assert failed.details == {"resource": "knowledge", "retryable": failed.retryable}
    return failed


def audited(resource: Resource) -> dict[str, Any]:
    """The details of the newest provider failure, as owners read them in the audit log."""
    entry = AuditEntry.objects.filter(
        project_id=resource.project_id, action="provider.failed", resource_id="knowledge"
    ).first()
    assert entry is not None
    assert entry.actor == wire.AUDIT_ACTOR
    assert TOKEN not in json.dumps(entry.detail)
    return entry.detail


# Recall: the request.


def test_recall_sends_exactly_the_protocol_body_and_headers(
    server: FaultyServer, resource: Resource
) -> None:
    server.script = [reply(200, GOOD_RECALL)]
    before = datetime.now(UTC)
    outcome = recall(resource)
    assert outcome == client.RecallOutcome(
        text="Use the free tier.", sources=[{"id": "fact:1"}], cursor="c-1", attempts=1
    )
    (seen,) = server.seen
    assert seen.path == "/oc-memory/v1"
    assert seen.headers["Authorization"] == f"Bearer {TOKEN}"
    assert seen.headers["X-Tenant"] == "acme"
    assert seen.headers["Content-Type"] == "application/json"
    body = seen.json()
    deadline = datetime.fromisoformat(body.pop("deadlineAt"))
    assert body == {
        "version": 1,
        "operation": "recall",
        "operationId": "mrq_1:knowledge",
        "partition": PARTITION,
        "access": "read-write",
        "input": {"text": "What hosting?"},
        "maxBytes": 64,
    }
    assert 9 <= (deadline - before).total_seconds() <= 11


# Recall: retries and their timing.


def test_503_then_200_retries_once_after_250ms_with_the_same_body(
    server: FaultyServer, resource: Resource
) -> None:
    server.script = [
        reply(503, {"error": {"code": "busy", "message": "Busy."}}),
        reply(200, GOOD_RECALL),
    ]
    outcome = recall(resource)
    assert outcome.attempts == 2
    assert outcome.text == "Use the free tier."
    assert len(server.seen) == 2
    assert server.seen[0].body == server.seen[1].body
    (gap,) = server.gaps()
    assert wire.RETRY_DELAYS[0] <= gap < wire.RETRY_DELAYS[1]


def test_retries_stop_after_two_spaced_250ms_then_1s(
    server: FaultyServer, resource: Resource
) -> None:
    server.script = [reply(502, {"error": {"code": "down", "message": "Down."}})]
    raised = failure(resource)
    assert (raised.reason, raised.http_status, raised.attempts) == ("http_error", 502, 3)
    assert raised.retryable
    assert audited(resource) == {
        "operation": "recall",
        "operationId": "mrq_1:knowledge",
        "reason": "http_error",
        "description": "answered HTTP 502: down",
        "attempts": 3,
        "status": 502,
    }
    assert len(server.seen) == 3
    first, second = server.gaps()
    assert 0.25 <= first < 1.0
    assert 1.0 <= second < 2.0
    assert len({seen.body for seen in server.seen}) == 1


@pytest.mark.parametrize("status", [408, 500])
def test_408_and_5xx_are_retried(server: FaultyServer, resource: Resource, status: int) -> None:
    server.script = [
        reply(status, {"error": {"code": "x", "message": "x"}}),
        reply(200, GOOD_RECALL),
    ]
    assert recall(resource, retry_delays=NO_WAIT).attempts == 2
    assert len(server.seen) == 2


def test_429_waits_for_a_valid_retry_after(server: FaultyServer, resource: Resource) -> None:
    server.script = [
        reply(
            429, {"error": {"code": "slow_down", "message": "Later."}}, headers={"Retry-After": "1"}
        ),
        reply(200, GOOD_RECALL),
    ]
    assert recall(resource).attempts == 2
    (gap,) = server.gaps()
    # Without the header the first retry would come after 250 ms.
    assert 1.0 <= gap < 2.0


def test_retry_after_that_does_not_fit_the_deadline_is_ignored(
    server: FaultyServer, resource: Resource
) -> None:
    server.script = [
        reply(
            429,
            {"error": {"code": "slow_down", "message": "Later."}},
            headers={"Retry-After": "60"},
        ),
        reply(200, GOOD_RECALL),
    ]
    assert recall(resource).attempts == 2
    (gap,) = server.gaps()
    assert 0.25 <= gap < 1.0


def test_other_4xx_is_not_retried(server: FaultyServer, resource: Resource) -> None:
    server.script = [reply(401, {"error": {"code": "unauthorized", "message": "Bad token."}})]
    raised = failure(resource)
    assert (raised.reason, raised.http_status, raised.attempts) == ("http_error", 401, 1)
    assert not raised.retryable
    assert "401" not in raised.message
    assert audited(resource)["description"] == "answered HTTP 401: unauthorized"
    assert len(server.seen) == 1


class TlsFaultyServer(FaultyServer):
    @property
    def origin(self) -> str:
        return f"https://127.0.0.1:{self.server_address[1]}"


def test_a_provider_behind_a_private_ca_is_reached_with_the_operators_ca_file(
    project: Project, provider_tls: Any, settings: Any
) -> None:
    """Every outbound call trusts MEMORYADMIN_PROVIDER_CA_FILE (core/exchange.py), the
    http kind's as the external kinds' and webhooks'; without it the same certificate
    is refused, as an unknown authority."""
    tls_server = TlsFaultyServer()
    tls_server.socket = provider_tls.wrap_socket(tls_server.socket, server_side=True)
    thread = threading.Thread(target=tls_server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        tls_server.script = [reply(200, GOOD_RECALL)]
        resource = declared(project, tls_server.origin)
        assert recall(resource).text == "Use the free tier."
        assert len(tls_server.seen) == 1
        settings.MEMORYADMIN_PROVIDER_CA_FILE = ""
        failed = failure(resource, retry_delays=NO_WAIT)
        assert failed.retryable
        assert audited(resource)["reason"] == "transport_error"
        assert len(tls_server.seen) == 1  # no TLS session: nothing reached the handler
    finally:
        tls_server.shutdown()
        tls_server.server_close()


def test_transport_failure_is_retried(server: FaultyServer, resource: Resource) -> None:
    server.script = [hang_up(), reply(200, GOOD_RECALL)]
    assert recall(resource, retry_delays=NO_WAIT).attempts == 2
    assert len(server.seen) == 2


def test_a_header_the_request_cannot_carry_is_a_transport_failure(server: FaultyServer) -> None:
    from memoryadmin.core.exchange import outbound

    with outbound(project="acme") as call:
        reply = call.send(
            "POST",
            f"{server.origin}/recall",
            headers={"Authorization": "Bearer caf\u00e9"},
            deadline=time.monotonic() + 5,
            limit=1024,
            content=b"{}",
        )
    assert (reply.failure, reply.failure_kind) == ("transport", "UnicodeEncodeError")
    assert server.seen == []


def test_the_deadline_is_the_protocols_ten_seconds() -> None:
    from memoryadmin import settings as product_settings

    assert product_settings.MEMORYADMIN_PROVIDER_DEADLINE_SECONDS == 10.0


def test_a_reply_slower_than_the_deadline_fails_at_the_deadline(
    server: FaultyServer, resource: Resource, short_deadline: float
) -> None:
    server.script = [stall(30, reply(200, GOOD_RECALL))]
    before = datetime.now(UTC)
    started = time.monotonic()
    raised = failure(resource)
    elapsed = time.monotonic() - started
    assert (raised.reason, raised.attempts) == ("timeout", 1)
    assert short_deadline <= elapsed < short_deadline + 1.5
    assert len(server.seen) == 1
    # The provider was told the same deadline.
    deadline_at = datetime.fromisoformat(server.seen[0].json()["deadlineAt"])
    assert 0 < (deadline_at - before).total_seconds() <= short_deadline + 0.1


# Recall: responses that are not accepted (never retried, never empty memory).


def test_redirects_are_not_followed(server: FaultyServer, resource: Resource) -> None:
    server.script = [
        reply(307, {}, headers={"Location": "/oc-memory/elsewhere"}),
        reply(200, GOOD_RECALL),
    ]
    raised = failure(resource)
    assert (raised.reason, raised.http_status, raised.attempts) == ("redirect", 307, 1)
    assert [seen.path for seen in server.seen] == ["/oc-memory/v1"]


@pytest.mark.parametrize("length", [True, False])
def test_a_body_over_64_kib_is_refused(
    server: FaultyServer, resource: Resource, length: bool
) -> None:
    big = {"text": "", "sources": [], "padding": "x" * (64 * 1024)}
    server.script = [reply(200, big, length=length)]
    raised = failure(resource)
    assert (raised.reason, raised.attempts) == ("response_too_large", 1)
    assert len(server.seen) == 1


def _gzip(data: bytes, times: int = 1) -> bytes:
    for _ in range(times):
        data = gzip.compress(data, 9)
    return data


def test_a_compressed_answer_is_read_once_decoded(server: FaultyServer, resource: Resource) -> None:
    for coding, encoded in [
        ("gzip", _gzip(json.dumps(GOOD_RECALL).encode())),
        ("deflate", zlib.compress(json.dumps(GOOD_RECALL).encode())),
        ("gzip, gzip", _gzip(json.dumps(GOOD_RECALL).encode(), times=2)),
    ]:
        server.script = [reply(200, raw=encoded, headers={"Content-Encoding": coding})]
        assert recall(resource).text == "Use the free tier."


def _cut_short(data: bytes, wbits: int) -> bytes:
    """`data` compressed and flushed whole, but without the end of its stream: inflated,
    it is all of `data`, and nothing says the stream ended."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return deflater.compress(data) + deflater.flush(zlib.Z_SYNC_FLUSH)


def _wrong_trailer(data: bytes) -> bytes:
    """`data` gzipped, its trailer's CRC-32 off by one."""
    whole = gzip.compress(data, 9)
    crc = (int.from_bytes(whole[-8:-4], "little") + 1) % 2**32
    return whole[:-8] + crc.to_bytes(4, "little") + whole[-4:]


GOOD = json.dumps(GOOD_RECALL).encode()


@pytest.mark.parametrize(
    ("coding", "encoded"),
    [
        ("gzip", _cut_short(GOOD, 31)),  # no final block, no trailer
        ("gzip", gzip.compress(GOOD)[:-4]),  # the trailer's length missing
        ("gzip", _wrong_trailer(GOOD)),
        ("deflate", _cut_short(GOOD, 15)),  # zlib format, no final block
        ("deflate", zlib.compress(GOOD)[:-4]),  # zlib format, no Adler-32
        ("deflate", _cut_short(GOOD, -15)),  # a bare deflate stream, no final block
        ("gzip, gzip", gzip.compress(_cut_short(GOOD, 31))),  # the inner layer cut short
    ],
    ids=[
        "gzip-no-end",
        "gzip-trailer-cut",
        "gzip-wrong-crc",
        "zlib-no-end",
        "zlib-no-adler",
        "bare-deflate-no-end",
        "gzip-gzip-inner-no-end",
    ],
)
def test_a_compressed_answer_cut_short_is_a_transport_failure(
    server: FaultyServer, resource: Resource, coding: str, encoded: bytes
) -> None:
    """A body whose compressed stream ends before its end (or whose trailer does not match)
    is not an answer, whatever it inflates to: like a connection reset mid-body, a failure
    that is retried, and never the half body."""
    server.script = [reply(200, raw=encoded, headers={"Content-Encoding": coding})]
    raised = failure(resource, retry_delays=NO_WAIT)
    assert (raised.reason, raised.retryable, raised.attempts) == ("transport_error", True, 3)
    assert len(server.seen) == 3
    detail = audited(resource)
    assert detail["reason"] == "transport_error"
    assert "DecodingError" in detail["description"]
    # Retried: a whole answer after it is read.
    cut = reply(200, raw=encoded, headers={"Content-Encoding": coding})
    server.script = [cut, reply(200, raw=gzip.compress(GOOD), headers={"Content-Encoding": "gzip"})]
    outcome = recall(resource, retry_delays=NO_WAIT)
    assert (outcome.text, outcome.attempts) == ("Use the free tier.", 2)


def test_a_compression_bomb_is_cut_at_the_limit_as_it_inflates(
    server: FaultyServer, resource: Resource
) -> None:
    """Two kilobytes that inflate to 256 MiB, gzip twice over: the answer is over the
    limit, and no more than a little of it is ever held."""
    inflater = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"0" * (1 << 20)
    once = b"".join(inflater.compress(zeros) for _ in range(256)) + inflater.flush()
    bomb = _gzip(once)
    assert len(bomb) < 4096
    server.script = [reply(200, raw=bomb, headers={"Content-Encoding": "gzip, gzip"})]
    tracemalloc.start()
    try:
        raised = failure(resource)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (raised.reason, raised.attempts) == ("response_too_large", 1)
    assert peak < 16 * 1024 * 1024
    assert audited(resource)["description"] == "answered with a body over 65536 bytes"


def test_a_wrong_content_type_is_refused(server: FaultyServer, resource: Resource) -> None:
    server.script = [reply(200, GOOD_RECALL, content_type="text/html")]
    raised = failure(resource)
    assert raised.reason == "invalid_response"
    assert "text/html" not in raised.message
    assert "text/html" in audited(resource)["description"]


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"{not json", "not valid JSON"),
        (b"[]", "must be a JSON object"),
        (b'{"sources": []}', "text is required"),
        (b'{"text": ""}', "sources is required"),
        (json.dumps({"text": "x" * 65, "sources": []}).encode(), "the resource allows 64"),
        (json.dumps({"text": "", "sources": [{"id": "a"}] * 101}).encode(), "at most 100"),
        (json.dumps({"text": "", "sources": [{"id": "a" * 1025}]}).encode(), "sources[0].id"),
        (json.dumps({"text": "", "sources": [{"title": "a"}]}).encode(), "sources[0].id"),
        (json.dumps({"text": "", "sources": [], "cursor": "c" * 1025}).encode(), "cursor"),
        (
            json.dumps({"text": "", "sources": [{"id": "a", "updatedAt": "soon"}]}).encode(),
            "updatedAt must be an ISO 8601 time",
        ),
    ],
)
def test_invalid_recall_responses_block_the_recall(
    server: FaultyServer, resource: Resource, raw: bytes, problem: str
) -> None:
    server.script = [reply(200, raw=raw)]
    raised = failure(resource)
    assert (raised.reason, raised.attempts) == ("invalid_response", 1)
    assert problem not in raised.message
    assert problem in audited(resource)["description"]


def test_text_of_exactly_max_bytes_and_empty_memory_are_accepted(
    server: FaultyServer, resource: Resource
) -> None:
    server.script = [
        reply(200, {"text": "é" * 32, "sources": []}),
        reply(200, {"text": "", "sources": []}),
    ]
    assert recall(resource).text == "é" * 32
    assert recall(resource) == client.RecallOutcome(text="", sources=[], cursor=None)


# Recall: configuration, checked before anything is sent.


def test_missing_secret_blocks_the_recall_before_any_request(
    server: FaultyServer, resource: Resource
) -> None:
    from memoryadmin.providers.models import Secret

    Secret.objects.all().delete()
    server.script = [reply(200, GOOD_RECALL)]
    raised = failure(resource)
    assert raised.reason == "secret_missing"
    assert server.seen == []


def test_origin_is_checked_before_the_secret_is_resolved(
    server: FaultyServer, resource: Resource
) -> None:
    from memoryadmin.providers.models import Secret

    Secret.objects.all().delete()
    resource.config["connection"]["origin"] = "http://memory.example.com"
    raised = failure(resource)
    assert raised.reason == "invalid_configuration"
    assert server.seen == []


def test_failures_never_log_the_secret(
    server: FaultyServer, resource: Resource, caplog: pytest.LogCaptureFixture
) -> None:
    server.script = [hang_up()]
    with caplog.at_level(logging.DEBUG):
        failure(resource, retry_delays=NO_WAIT)
    assert "reason=transport_error" in caplog.text
    assert "RemoteProtocolError" in audited(resource)["description"]
    assert TOKEN not in caplog.text


# Tools.


def test_read_tool_is_retried_and_its_result_reaches_the_model(
    server: FaultyServer, resource: Resource
) -> None:
    server.script = [reply(503, {}), reply(200, {"result": {"facts": ["a"]}})]
    outcome = tool(
        resource,
        "lookup",
        arguments={"q": "hosting", "memory": "knowledge"},
        retry_delays=NO_WAIT,
    )
    assert (outcome.kind, outcome.payload, outcome.attempts) == ("result", {"facts": ["a"]}, 2)
    body = server.seen[0].json()
    body.pop("deadlineAt")
    assert body == {
        "version": 1,
        "operation": "tool",
        "operationId": "toolcall_1:knowledge",
        "partition": PARTITION,
        "access": "read-write",
        "tool": "lookup",
        "arguments": {"q": "hosting"},
        "cursor": "c-1",
    }
    assert server.seen[0].body == server.seen[1].body


def test_tool_without_a_cursor_sends_none(server: FaultyServer, resource: Resource) -> None:
    server.script = [reply(200, {"result": "ok"})]
    assert tool(resource, "lookup", cursor=None).payload == "ok"
    assert "cursor" not in server.seen[0].json()


def test_conflict_envelope_reaches_the_model_unchanged(
    server: FaultyServer, resource: Resource
) -> None:
    envelope = {"error": {"code": "conflict", "message": "Knowledge changed.", "details": {"n": 1}}}
    server.script = [reply(409, envelope)]
    outcome = tool(resource, "save")
    assert (outcome.kind, outcome.payload, outcome.http_status) == ("error", envelope, 409)
    assert len(server.seen) == 1


def test_non_idempotent_write_is_never_retried_on_5xx(
    server: FaultyServer, resource: Resource
) -> None:
    envelope = {"error": {"code": "unavailable", "message": "Try later."}}
    server.script = [reply(503, envelope), reply(200, {"result": {"status": "stored"}})]
    outcome = tool(resource, "note")
    assert (outcome.kind, outcome.payload, outcome.attempts) == ("error", envelope, 1)
    assert len(server.seen) == 1


def test_non_idempotent_write_transport_failure_is_uncertain(
    server: FaultyServer, resource: Resource
) -> None:
    server.script = [hang_up(), reply(200, {"result": {"status": "stored"}})]
    outcome = tool(resource, "note")
    assert (outcome.kind, outcome.payload, outcome.attempts) == (
        "uncertain",
        {"status": "uncertain"},
        1,
    )
    assert len(server.seen) == 1


def test_non_idempotent_write_timeout_is_uncertain_without_retry(
    server: FaultyServer, resource: Resource, short_deadline: float
) -> None:
    server.script = [stall(30, reply(200, {"result": {"status": "stored"}}))]
    started = time.monotonic()
    outcome = tool(resource, "note")
    elapsed = time.monotonic() - started
    assert outcome.payload == {"status": "uncertain"}
    assert short_deadline <= elapsed < short_deadline + 1.5
    assert len(server.seen) == 1


def test_idempotent_write_is_retried_with_the_same_operation(
    server: FaultyServer, resource: Resource
) -> None:
    server.script = [hang_up(), hang_up(), reply(200, {"result": {"status": "stored"}})]
    outcome = tool(resource, "save", retry_delays=NO_WAIT)
    assert (outcome.kind, outcome.payload, outcome.attempts) == (
        "result",
        {"status": "stored"},
        3,
    )
    assert len({seen.body for seen in server.seen}) == 1
    assert server.seen[0].json()["operationId"] == "toolcall_1:knowledge"


def test_idempotent_write_whose_retries_are_exhausted_is_a_visible_error(
    server: FaultyServer, resource: Resource
) -> None:
    server.script = [hang_up(), hang_up(), hang_up(), reply(200, {"result": {"status": "stored"}})]
    outcome = tool(resource, "save", retry_delays=NO_WAIT)
    assert (outcome.kind, outcome.attempts) == ("failed", 3)
    assert outcome.payload["error"]["code"] == "provider_failed"
    assert len(server.seen) == 3
    assert len({seen.body for seen in server.seen}) == 1


def test_tool_responses_without_result_or_envelope_are_host_errors(
    server: FaultyServer, resource: Resource
) -> None:
    server.script = [
        reply(200, {"status": "stored"}),
        reply(400, raw=b"oops", content_type="text/plain"),
    ]
    first = tool(resource, "lookup")
    second = tool(resource, "lookup")
    assert first.kind == second.kind == "failed"
    for outcome in (first, second):
        assert outcome.payload == {
            "error": {
                "code": "provider_failed",
                "message": wire.failure_message("knowledge", retryable=False),
                "details": {"resource": "knowledge", "retryable": False},
            }
        }
    assert second.http_status == 400
    assert "text/plain" in audited(resource)["description"]


def test_invalid_arguments_are_refused_before_sending(
    server: FaultyServer, resource: Resource
) -> None:
    server.script = [reply(200, {"result": "ok"})]
    for arguments in ({"q": "x", "extra": 1}, {"q": "x" * 21}, {}, ["q"]):
        with pytest.raises(InvalidToolArguments):
            tool(resource, "lookup", arguments=arguments)
    assert server.seen == []


def test_an_undeclared_tool_is_refused_before_sending(
    server: FaultyServer, resource: Resource
) -> None:
    # Whether a binding's access permits a tool is the runtime's rule (the conformance
    # suite); the client sends only what the declaration names.
    server.script = [reply(200, {"result": "ok"})]
    with pytest.raises(ToolNotPermitted):
        tool(resource, "undeclared")
    assert server.seen == []


def test_provider_call_outcomes_are_counted_for_metrics(
    server: FaultyServer, resource: Resource
) -> None:
    from memoryadmin.metrics import PROVIDER_CALLS

    def count(operation: str, outcome: str) -> float:
        return PROVIDER_CALLS.labels(operation, outcome)._value.get()

    before = {
        "ok": count("recall", "ok"),
        "http_error": count("recall", "http_error"),
        "result": count("tool", "result"),
    }
    server.script = [reply(200, GOOD_RECALL), reply(401, {"error": {"code": "x", "message": "x"}})]
    recall(resource)
    failure(resource)
    assert count("recall", "ok") == before["ok"] + 1
    assert count("recall", "http_error") == before["http_error"] + 1
    assert count("tool", "result") == before["result"]
