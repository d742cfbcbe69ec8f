"""The host side of the HTTP memory provider protocol: recall and tool calls.

One operation is one request body, sent as every provider call is (wire.py: retries,
secrets bound to origins, failures generic to callers and detailed in the logs; each
attempt through core/exchange.py: egress, deadline, size limit); the same operationId,
the same bytes on every attempt. Retries happen only for operations without
side effects or declared idempotent. An attempt in flight is stopped by
closing its connection when the caller cancels.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.views.decorators.debug import sensitive_variables

from memoryadmin.core.cancellation import Cancellation, current_cancellation
from memoryadmin.core.concurrency import Deadline, provider_call
from memoryadmin.core.errors import (
    InvalidRequest,
    InvalidToolArguments,
    envelope_of,
)
from memoryadmin.core.exchange import Reply, outbound
from memoryadmin.core.inputs import InvalidInput, parse_instant
from memoryadmin.core.jsonbody import BODY_MAX_BYTES
from memoryadmin.core.tools import tool_arguments_validate, tool_retryable
from memoryadmin.memory.limits import utf8_len
from memoryadmin.memory.models import Resource
from memoryadmin.memory.representations import iso_ms
from memoryadmin.metrics import provider_metered
from memoryadmin.providers.declarations import (
    HTTP_KIND,
    origin_check,
    path_check,
    path_within,
)
from memoryadmin.providers.errors import ProviderFailure
from memoryadmin.providers.tools import http_tool_get
from memoryadmin.providers.wire import (
    RETRY_DELAYS,
    Misconfigured,
    exchange,
    failure_logged,
    failure_message,
    failure_record,
    header_value,
    unusable,
)

PROTOCOL_VERSION = 1
SOURCES_MAX = 100
ID_MAX_BYTES = 1024
ACCESS_LEVELS = {"read", "read-write"}
USER_AGENT = "memoryadmin-memory-host/1"
UNCERTAIN: dict[str, Any] = {"status": "uncertain"}
CANCELLED: dict[str, Any] = {"status": "cancelled"}


@dataclass(frozen=True)
class RecallOutcome:
    text: str
    sources: list[dict[str, str]]
    # Kept for this recall's tool calls; never shown to the model.
    cursor: str | None
    attempts: int = 1


@dataclass(frozen=True)
class ToolOutcome:
    """`payload` is exactly what the model receives.

    kind: "result" (the provider's `result`), "error" (the provider's error
    envelope, unchanged), "failed" (the host's envelope: no usable answer),
    "uncertain" (a write whose outcome is unknown: `{"status": "uncertain"}`)
    or "cancelled" (the caller cancelled it: `{"status": "cancelled"}`).
    """

    kind: str
    payload: Any
    attempts: int
    http_status: int | None = None


@dataclass(frozen=True)
class _Target:
    url: str
    # Whose share of outbound name lookups the call counts against.
    project: str
    # Resolved secrets: kept out of reprs, and so out of tracebacks.
    headers: dict[str, str] = field(repr=False)


# Connection.


@sensitive_variables("headers")
def _target(resource: Resource) -> _Target:
    """The URL and headers of a provider; the origin is checked before any secret is read."""
    if resource.kind != HTTP_KIND:
        raise Misconfigured("invalid_configuration", "it is not an http provider")
    config = resource.config
    connection = config.get("connection") or {}
    try:
        origin = origin_check(connection.get("origin"), where="connection.origin")
        path = path_check(config.get("path"), where="path")
    except InvalidRequest as exc:
        raise Misconfigured("invalid_configuration", exc.message) from None
    if not path_within(path, connection.get("pathPrefix", "/")) or "POST" not in connection.get(
        "methods", []
    ):
        raise Misconfigured(
            "invalid_configuration", f"the connection does not permit POST to {path}"
        )
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "User-Agent": USER_AGENT,
    }
    for name, value in connection.get("headers", {}).items():
        headers[name] = header_value(resource, name, value, origin=origin, path=path)
    return _Target(url=origin + path, project=resource.project_id, headers=headers)


def _exchange(
    target: _Target,
    body: bytes,
    *,
    retryable: bool,
    deadline: float,
    retry_delays: Sequence[float],
    cancelled: threading.Event | None = None,
    cancellation: Cancellation | None = None,
) -> tuple[Reply, int]:
    """Sends one operation, retrying as the protocol allows; the final reply and attempt count.

    Once `cancelled` is set (the operation's answer is no longer wanted), no
    further attempt starts. When the caller cancels (`cancellation`, by
    default the current scope's), the attempt in flight is stopped by
    closing its connection, and the reply is `cancelled`.
    """
    cancellation = cancellation or current_cancellation()
    with outbound(project=target.project) as out:

        def attempt() -> Reply:
            reply = out.send(
                "POST",
                target.url,
                headers=target.headers,
                content=body,
                deadline=deadline,
                limit=BODY_MAX_BYTES,
            )
            if cancellation is not None and cancellation.event.is_set():
                # The watch below closed the connection: the caller cancelled.
                return Reply(failure="cancelled")
            return reply

        watch = cancellation.watch(out.abort) if cancellation else contextlib.nullcontext()
        with watch:
            reply = exchange(
                attempt,
                retryable=retryable,
                deadline=deadline,
                retry_delays=retry_delays,
                cancelled=cancelled,
                stopped=cancellation.poll if cancellation is not None else lambda: False,
            )
    return reply, reply.attempts


# Bodies.


def _encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _check_access(access: str) -> None:
    if access not in ACCESS_LEVELS:
        raise InvalidRequest("access must be 'read' or 'read-write'.")


def _envelope(data: Any) -> dict[str, Any] | None:
    """The provider's error envelope when `data` is one."""
    if not isinstance(data, dict) or not isinstance(data.get("error"), dict):
        return None
    error = data["error"]
    if not isinstance(error.get("code"), str) or not isinstance(error.get("message"), str):
        return None
    if "details" in error and not isinstance(error["details"], dict):
        return None
    return data


# Recall.


def _check_id(value: object, what: str) -> str:
    if not isinstance(value, str) or value == "":
        raise ValueError(f"{what} must be a nonempty string")
    if utf8_len(value) > ID_MAX_BYTES:
        raise ValueError(f"{what} is over {ID_MAX_BYTES} UTF-8 bytes")
    return value


def _source(raw: object, index: int) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise ValueError(f"sources[{index}] must be an object")
    source = {"id": _check_id(raw.get("id"), f"sources[{index}].id")}
    for name in ("title", "revision", "updatedAt"):
        value = raw.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ValueError(f"sources[{index}].{name} must be a string")
        source[name] = value
    if "updatedAt" in source:
        try:
            parse_instant(source["updatedAt"], field="updatedAt")
        except InvalidInput as exc:
            raise ValueError(f"sources[{index}].updatedAt must be an ISO 8601 time") from exc
    return source


def _recall_projection(data: Any, max_bytes: int) -> tuple[str, list[dict[str, str]], str | None]:
    if not isinstance(data, dict):
        raise ValueError("the body must be a JSON object")
    text, sources, cursor = data.get("text"), data.get("sources"), data.get("cursor")
    if not isinstance(text, str):
        raise ValueError("text is required and must be a string")
    if not isinstance(sources, list):
        raise ValueError("sources is required and must be a list")
    if utf8_len(text) > max_bytes:
        raise ValueError(f"text is {utf8_len(text)} UTF-8 bytes; the resource allows {max_bytes}")
    if len(sources) > SOURCES_MAX:
        raise ValueError(f"{len(sources)} sources; at most {SOURCES_MAX} are allowed")
    checked = [_source(raw, index) for index, raw in enumerate(sources)]
    if cursor is not None:
        cursor = _check_id(cursor, "cursor")
    return text, checked, cursor


@dataclass(frozen=True)
class RecallRequest:
    """One binding's recall, ready to send: nothing in it needs the database any more."""

    call: _Call
    target: _Target
    body: bytes

    @property
    def resource(self) -> Resource:
        return self.call.resource


@dataclass(frozen=True)
class RecallReply:
    reply: Reply
    attempts: int


def recall_request(
    *,
    resource: Resource,
    partition: str,
    access: str,
    operation_id: str,
    input_text: str | None,
    deadline: Deadline,
) -> RecallRequest:
    """The request of one binding's recall; raises ProviderFailure when it cannot be sent.

    `operation_id` is `<recallId>:<resource>`. Secrets are resolved here, in
    the caller's thread.
    """
    _check_access(access)
    call = _Call(resource=resource, operation="recall", operation_id=operation_id)
    try:
        target = _target(resource)
    except Misconfigured as exc:
        raise call.failure(exc.reason, exc.description, attempts=0) from None
    body = _encode(
        {
            "version": PROTOCOL_VERSION,
            "operation": "recall",
            "operationId": operation_id,
            "partition": partition,
            "access": access,
            "deadlineAt": iso_ms(deadline.wall),
            "input": {"text": input_text},
            "maxBytes": resource.max_bytes,
        }
    )
    if len(body) > BODY_MAX_BYTES:
        raise call.failure(
            "request_too_large", f"the recall request is over {BODY_MAX_BYTES} bytes", attempts=0
        )
    return RecallRequest(call=call, target=target, body=body)


def recall_send(
    request: RecallRequest,
    cancelled: threading.Event | None = None,
    *,
    deadline: Deadline,
    retry_delays: Sequence[float] = RETRY_DELAYS,
    cancellation: Cancellation | None = None,
) -> RecallReply:
    """Exchanges one recall with its provider; safe in any thread (no database)."""
    reply, attempts = _exchange(
        request.target,
        request.body,
        retryable=True,
        deadline=deadline.at,
        retry_delays=retry_delays,
        cancelled=cancelled,
        cancellation=cancellation,
    )
    return RecallReply(reply=reply, attempts=attempts)


@provider_metered("recall")
def recall_outcome(request: RecallRequest, sent: RecallReply) -> RecallOutcome:
    """The projection of a recall's reply; raises ProviderFailure when the recall must be blocked.

    A failed recall never turns into empty memory.
    """
    return _recall_outcome(request.call, sent.reply, sent.attempts)


def provider_recall(
    *,
    resource: Resource,
    partition: str,
    access: str,
    operation_id: str,
    input_text: str | None,
    retry_delays: Sequence[float] = RETRY_DELAYS,
) -> RecallOutcome:
    """Recalls one namespace binding alone; raises ProviderFailure when the recall must be blocked.

    It counts against the project's cap on concurrent provider calls
    (ProviderBusy beyond it).
    """
    deadline = Deadline.after()
    request = recall_request(
        resource=resource,
        partition=partition,
        access=access,
        operation_id=operation_id,
        input_text=input_text,
        deadline=deadline,
    )
    sent = provider_call(
        project_id=resource.project_id,
        deadline=deadline,
        call=lambda cancelled: recall_send(
            request, deadline=deadline, retry_delays=retry_delays, cancelled=cancelled
        ),
    )
    return recall_outcome(request, sent)


def _recall_outcome(call: _Call, reply: Reply, attempts: int) -> RecallOutcome:
    unread = unusable(reply, BODY_MAX_BYTES)
    if unread is not None:
        reason, description = unread
        raise call.failure(reason, description, attempts=attempts, reply=reply)
    assert reply.status is not None
    try:
        data = reply.json()
    except ValueError as exc:
        data, problem = None, str(exc)
    if reply.status != 200:
        envelope = _envelope(data)
        said = f": {envelope['error']['code']}" if envelope else ""
        raise call.failure(
            "http_error", f"answered HTTP {reply.status}{said}", attempts=attempts, reply=reply
        )
    try:
        if data is None:
            raise ValueError(problem)
        text, sources, cursor = _recall_projection(data, call.resource.max_bytes)
    except ValueError as exc:
        raise call.failure(
            "invalid_response",
            f"sent an invalid recall response: {exc}",
            attempts=attempts,
            reply=reply,
        ) from None
    return RecallOutcome(text=text, sources=sources, cursor=cursor, attempts=attempts)


# Failures: generic to the caller, detailed in the server log and the audit log.


@dataclass(frozen=True)
class _Call:
    resource: Resource
    operation: str
    operation_id: str

    def record(
        self, reason: str, description: str, *, attempts: int, status: int | None = None
    ) -> None:
        """Logs and audits what went wrong, for the owners; never shown to callers."""
        detail = failure_logged(
            self.resource,
            operation=self.operation,
            operation_id=self.operation_id,
            reason=reason,
            description=description,
            attempts=attempts,
            status=status,
        )
        failure_record(self.resource, detail)

    def failure(
        self, reason: str, description: str, *, attempts: int, reply: Reply | None = None
    ) -> ProviderFailure:
        status = reply.status if reply is not None else None
        self.record(reason, description, attempts=attempts, status=status)
        retryable = reply is not None and reply.retryable
        return ProviderFailure(
            failure_message(self.resource.resource_id, retryable=retryable),
            resource=self.resource.resource_id,
            retryable=retryable,
            reason=reason,
            attempts=attempts,
            http_status=status,
        )


# Tools.


@provider_metered("tool")
def provider_tool(
    *,
    resource: Resource,
    tool: dict[str, Any] | str,
    partition: str,
    access: str,
    operation_id: str,
    arguments: object,
    cursor: str | None,
    retry_delays: Sequence[float] = RETRY_DELAYS,
) -> ToolOutcome:
    """Runs one tool call against one resource; see ToolOutcome for what the model receives.

    `operation_id` is `<toolCallId>:<resource>`; `cursor` is the originating
    recall's. Raises ToolNotPermitted (an undeclared tool) and InvalidToolArguments
    before anything is sent. Whether the binding's access permits the tool, and the
    project's bounds on provider calls, are the runtime's (agents/services/runtime.py).
    """
    _check_access(access)
    deadline = Deadline.after()
    name = tool if isinstance(tool, str) else tool["name"]
    # The declaration decides, whatever the caller passes: endpoints cannot add tools.
    declared = http_tool_get(resource=resource, name=name)
    provider_arguments = tool_arguments_validate(tool=declared, arguments=arguments)
    payload: dict[str, Any] = {
        "version": PROTOCOL_VERSION,
        "operation": "tool",
        "operationId": operation_id,
        "partition": partition,
        "access": access,
        "deadlineAt": iso_ms(deadline.wall),
        "tool": name,
        "arguments": provider_arguments,
    }
    if cursor is not None:
        payload["cursor"] = cursor
    body = _encode(payload)
    if len(body) > BODY_MAX_BYTES:
        raise InvalidToolArguments(
            f"memory_{name}: the call is over {BODY_MAX_BYTES} bytes; send less."
        )
    call = _Call(resource=resource, operation=f"tool:{name}", operation_id=operation_id)
    try:
        target = _target(resource)
    except Misconfigured as exc:
        return _failed(call, exc.reason, exc.description, attempts=0)
    retryable = tool_retryable(declared)
    reply, attempts = _send(
        target, body, retryable=retryable, deadline=deadline, retry_delays=retry_delays
    )
    return _tool_outcome(call, declared, reply, attempts)


def _send(
    target: _Target,
    body: bytes,
    *,
    retryable: bool,
    deadline: Deadline,
    retry_delays: Sequence[float],
) -> tuple[Reply, int]:
    """One operation in the caller's thread, within the runtime's reservation of the
    project's provider calls."""
    return _exchange(
        target, body, retryable=retryable, deadline=deadline.at, retry_delays=retry_delays
    )


def _failed(
    call: _Call, reason: str, description: str, *, attempts: int, reply: Reply | None = None
) -> ToolOutcome:
    failure = call.failure(reason, description, attempts=attempts, reply=reply)
    return ToolOutcome(
        kind="failed",
        payload=envelope_of(failure, code="provider_failed"),
        attempts=attempts,
        http_status=failure.http_status,
    )


def _tool_outcome(call: _Call, tool: dict[str, Any], reply: Reply, attempts: int) -> ToolOutcome:
    unread = unusable(reply, BODY_MAX_BYTES)
    if unread is not None and reply.failure == "cancelled":
        call.record("cancelled", unread[1], attempts=attempts)
        return ToolOutcome(kind="cancelled", payload=dict(CANCELLED), attempts=attempts)
    if (
        unread is not None
        and reply.failure in {"timeout", "transport"}
        and not tool_retryable(tool)
    ):
        # A write sent once may have committed before the reply was lost; only the
        # next recall can tell. An idempotent write was retried: its exhausted
        # retries are a visible error (spec 000, Deadlines and retries).
        call.record("uncertain", unread[1], attempts=attempts)
        return ToolOutcome(kind="uncertain", payload=dict(UNCERTAIN), attempts=attempts)
    if unread is not None:
        reason, description = unread
        return _failed(call, reason, description, attempts=attempts, reply=reply)
    try:
        data = reply.json()
    except ValueError as exc:
        return _failed(
            call,
            "invalid_response",
            f"sent an invalid response (HTTP {reply.status}): {exc}",
            attempts=attempts,
            reply=reply,
        )
    if reply.status == 200 and isinstance(data, dict) and "result" in data:
        return ToolOutcome(
            kind="result", payload=data["result"], attempts=attempts, http_status=200
        )
    envelope = _envelope(data) if reply.status != 200 else None
    if envelope is not None:
        return ToolOutcome(
            kind="error", payload=envelope, attempts=attempts, http_status=reply.status
        )
    what = "without a result" if reply.status == 200 else "without an error envelope"
    return _failed(
        call,
        "invalid_response",
        f"answered HTTP {reply.status} {what}",
        attempts=attempts,
        reply=reply,
    )


# Operation status: where an accepted or uncertain write ended (our extension of the protocol).

STATUS_STATES = {
    "stored": "succeeded",
    "accepted": "queued",
    "partial": "partial",
    "failed": "failed",
    # The provider never saw the operation: an uncertain write did not happen.
    "unknown": "failed",
}


def provider_status(
    *,
    resource: Resource,
    partition: str,
    operation_id: str,
    retry_delays: Sequence[float] = RETRY_DELAYS,
) -> tuple[str, str]:
    """Asks the endpoint about an earlier operation: (state, the provider's status word).

    Sends `{"operation": "status", "operationId": ...}` with the partition; the answer
    is `{"result": {"status": "stored" | "accepted" | "partial" | "failed" | "unknown"}}`.
    Raises ProviderFailure when there is no usable answer.
    """
    deadline = Deadline.after()
    call = _Call(resource=resource, operation="status", operation_id=operation_id)
    try:
        target = _target(resource)
    except Misconfigured as exc:
        raise call.failure(exc.reason, exc.description, attempts=0) from None
    body = _encode(
        {
            "version": PROTOCOL_VERSION,
            "operation": "status",
            "operationId": operation_id,
            "partition": partition,
            "deadlineAt": iso_ms(deadline.wall),
        }
    )
    # Counted against the project's bounds on provider calls, as every call is.
    reply, attempts = provider_call(
        project_id=resource.project_id,
        deadline=deadline,
        call=lambda _: _send(
            target, body, retryable=True, deadline=deadline, retry_delays=retry_delays
        ),
    )
    unread = unusable(reply, BODY_MAX_BYTES)
    if unread is not None:
        raise call.failure(*unread, attempts=attempts, reply=reply)
    try:
        data = reply.json()
        word = data["result"]["status"] if reply.status == 200 else None
    except (ValueError, KeyError, TypeError):
        word = None
    if word not in STATUS_STATES:
        raise call.failure(
            "invalid_response",
            f"answered the status request with HTTP {reply.status} and no known status",
            attempts=attempts,
            reply=reply,
        )
    return STATUS_STATES[word], word
