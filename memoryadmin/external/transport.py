"""HTTP to external providers: one connection per operation, one cancellation per attempt.

A `Connection` is made for one resource in the caller's thread: the base URL
is checked first, then the declared headers are resolved from managed
secrets bound to that origin (spec 004: validate before resolving or
attaching credentials). After that it needs no database, so provider calls
may run in worker threads.

Every attempt gets its own child cancellation, aborted when the caller
cancels or when the operation's deadline passes: the socket is shut down, so
a provider that stalls mid-answer is left at once, not at a read timeout.
Retries follow the http providers' policy (spec 000): transport failures,
408, 429 and 5xx, at most twice, after 250 ms and 1 s (a Retry-After that
fits the deadline wins), only for reads and idempotent writes. Redirects are
never followed and connections go only where the egress rule allows.

Failures reach callers as generic messages; the details go to the server log
and the audit log (`provider.failed`), never a header value.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from django.views.decorators.debug import sensitive_variables

from memoryadmin.memory.cancellation import Cancellation, current_cancellation
from memoryadmin.memory.errors import DomainError, InvalidRequest
from memoryadmin.memory.limits import BODY_MAX_BYTES
from memoryadmin.memory.models import Resource
from memoryadmin.memory.services.audit import audit_record
from memoryadmin.providers.client import AUDIT_ACTOR, RETRY_DELAYS, failure_message
from memoryadmin.providers.concurrency import Deadline
from memoryadmin.providers.declarations import credential_header
from memoryadmin.providers.egress import EgressTransport, egress_refusal, egress_transport
from memoryadmin.providers.errors import CallFailed, SecretNotBound, SecretNotFound
from memoryadmin.providers.services.secrets import secret_for_request

logger = logging.getLogger(__name__)

USER_AGENT = "memoryadmin-external-provider/1"
RETRYABLE_STATUSES = {408, 429}
# Largest provider answer read (list pages of hosted providers run larger
# than the protocol's 64 KiB bodies).
REPLY_MAX_BYTES = 4 * 1024 * 1024
# How often an attempt's watcher looks at the calling slot's cancellation, and how often
# at the runtime's (a shared-cache read).
WATCH_INTERVAL = 0.02
POLL_SECONDS = 0.1


class ExternalFailure(CallFailed):
    """An external provider's call failed (502). What callers see is generic."""

    status = 502
    code = "provider_failed"


class Cancelled(DomainError):
    """The caller cancelled while an attempt was in flight (its outcome is unknown)."""

    status = 409
    code = "cancelled"


@dataclass
class Reply:
    status: int | None = None
    headers: httpx.Headers = field(default_factory=httpx.Headers)
    body: bytes = b""
    # "timeout", "transport", "refused", "cancelled" or "too_large" when no
    # usable response arrived.
    failure: str | None = None
    failure_kind: str = ""
    attempts: int = 1

    @property
    def retryable(self) -> bool:
        if self.failure is not None:
            return self.failure in {"timeout", "transport"}
        assert self.status is not None
        return self.status in RETRYABLE_STATUSES or 500 <= self.status <= 599

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not JSON."""
        media = self.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json" and not media.endswith("+json"):
            raise ValueError(f"the content type is {media or 'missing'}, not application/json")
        return json.loads(self.body.decode("utf-8"))


@dataclass(frozen=True)
class Request:
    method: str
    url: str
    params: dict[str, str] | None
    body: bytes | None
    retryable: bool
    # What the audit log calls it (never a header value, never the body).
    operation: str
    content_type: str = "application/json"
    # Send the connection's headers (its credentials) or only the neutral ones.
    credentials: bool = True


@dataclass
class Connection:
    """One resource's provider, ready to call: checked base URL and resolved headers."""

    resource: Resource
    origin: str
    base_path: str
    headers: dict[str, str] = field(repr=False)
    deadline: Deadline = field(default_factory=Deadline.after)
    cancelled: threading.Event = field(default_factory=threading.Event)
    retry_delays: Sequence[float] = RETRY_DELAYS
    # Query parameters every request carries (an account's scoping ids).
    params: dict[str, str] = field(default_factory=dict)
    # The caller's cancellation (the runtime's cancel endpoint), taken in the caller's
    # thread: calls may run in worker threads, which do not see its context.
    cancellation: Cancellation | None = None
    # While calls run in worker threads (which never touch the database), failures
    # wait here for the caller's thread to audit them (`flush`).
    deferred: list[dict[str, Any]] | None = None

    def call(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        params: dict[str, str] | None = None,
        body: Any = None,
        retryable: bool,
        origin: str | None = None,
    ) -> Reply:
        """Sends one operation (retrying as allowed) and returns the final reply."""
        encoded = None if body is None else json.dumps(body, ensure_ascii=False).encode()
        url = (origin or self.origin) + (path if origin else self.base_path + path)
        merged = {**self.params, **(params or {})} or None
        request = Request(method, url, merged, encoded, retryable, operation)
        return _exchange(self, request)

    def call_form(self, url: str, form: str, *, operation: str) -> Reply:
        """A form POST to another endpoint of the provider (a token endpoint), without the
        connection's credentials; side-effect free, so retried like a read."""
        request = Request(
            "POST",
            url,
            None,
            form.encode(),
            True,
            operation,
            content_type="application/x-www-form-urlencoded",
            credentials=False,
        )
        return _exchange(self, request)

    def failure(
        self, reason: str, description: str, *, operation: str, reply: Reply | None = None
    ) -> ExternalFailure:
        """Logs and audits the details for the owners; returns what callers may learn."""
        resource = self.resource
        attempts = reply.attempts if reply is not None else 0
        status = reply.status if reply is not None else None
        logger.warning(
            "external memory provider call failed: resource=%s operation=%s reason=%s "
            "attempts=%d: %s",
            resource,
            operation,
            reason,
            attempts,
            description,
        )
        detail: dict[str, Any] = {
            "operation": operation,
            "reason": reason,
            "description": description,
            "attempts": attempts,
        }
        if status is not None:
            detail["status"] = status
        if self.deferred is not None:
            self.deferred.append(detail)
        else:
            self._audit(detail)
        retryable = reply is not None and reply.retryable
        return ExternalFailure(
            failure_message(resource.resource_id, retryable=retryable),
            resource=resource.resource_id,
            retryable=retryable,
            reason=reason,
            attempts=attempts,
            http_status=status,
        )

    def _audit(self, detail: dict[str, Any]) -> None:
        resource = self.resource
        audit_record(
            project_id=resource.project_id,
            environment=resource.environment,
            actor=AUDIT_ACTOR,
            action="provider.failed",
            resource_id=resource.resource_id,
            detail=detail,
        )

    def flush(self) -> None:
        """Audits the failures deferred while calls ran in other threads. A call
        abandoned after a failure that fails later is logged, not audited."""
        pending, self.deferred = self.deferred or [], []
        for detail in pending:
            self._audit(detail)


@sensitive_variables("headers", "value")
def connection_open(
    *,
    resource: Resource,
    origin: str,
    base_path: str,
    headers: dict[str, Any],
    extra: dict[str, str] | None = None,
    deadline: Deadline | None = None,
    cancelled: threading.Event | None = None,
) -> Connection:
    """A connection whose declared headers are resolved now, for `origin` only.

    `origin` and `base_path` were checked by the caller (urls.base_url_check)
    before this reads any secret. A secret not set, or not bound to `origin`,
    fails the call before anything is sent.
    """
    resolved = {"Accept": "application/json", "User-Agent": USER_AGENT, **(extra or {})}
    connection = Connection(resource=resource, origin=origin, base_path=base_path, headers={})
    for name, value in headers.items():
        if isinstance(value, str):
            if credential_header(name):
                raise connection.failure(
                    "invalid_configuration",
                    f"header {name} is a credential written as a literal",
                    operation="connect",
                )
            resolved[name] = value
            continue
        secret = secret_value(connection, value["secret"], origin=origin, path=base_path or "/")
        scheme = value.get("scheme")
        resolved[name] = f"{scheme} {secret}" if scheme else secret
    connection.headers = resolved
    if deadline is not None:
        connection.deadline = deadline
    if cancelled is not None:
        connection.cancelled = cancelled
    connection.cancellation = current_cancellation()
    return connection


@sensitive_variables("value")
def secret_value(connection: Connection, name: str, *, origin: str, path: str) -> str:
    resource = connection.resource
    try:
        value = secret_for_request(
            project_id=resource.project_id,
            environment=resource.environment,
            name=name,
            origin=origin,
            path=path,
        )
    except SecretNotFound as exc:
        raise connection.failure("secret_missing", exc.message, operation="connect") from None
    except SecretNotBound as exc:
        raise connection.failure("secret_not_bound", exc.message, operation="connect") from None
    return value


# Sending.


def _exchange(connection: Connection, request: Request) -> Reply:
    deadline = connection.deadline.at
    attempts = 0
    while True:
        attempts += 1
        reply = _attempt(connection, request, deadline)
        reply.attempts = attempts
        if not request.retryable or not reply.retryable or attempts > len(connection.retry_delays):
            return reply
        delay = _retry_delay(reply, connection.retry_delays[attempts - 1], deadline)
        if delay is None or connection.cancelled.wait(delay):
            return reply


def _retry_delay(reply: Reply, default: float, deadline: float) -> float | None:
    from memoryadmin.providers.client import _retry_after

    now = time.monotonic()
    requested = _retry_after(reply.headers) if reply.failure is None else None
    if requested is not None and now + requested < deadline:
        return requested
    return default if now + default < deadline else None


def _watch(
    transport: EgressTransport,
    done: threading.Event,
    connection: Connection,
    deadline: float,
    why: list[str],
) -> None:
    """The attempt's child cancellation: aborts it when the caller cancels (the calling
    slot's event, or the runtime's cancellation) or when the deadline passes."""
    polled = 0.0
    while not done.is_set():
        now = time.monotonic()
        cancelled = connection.cancelled.is_set()
        if not cancelled and connection.cancellation is not None and now - polled >= POLL_SECONDS:
            polled = now
            cancelled = connection.cancellation.poll()
        if cancelled or now >= deadline:
            why.append("cancelled" if cancelled else "timeout")
            transport.abort()
            return
        done.wait(WATCH_INTERVAL)


def _attempt(connection: Connection, request: Request, deadline: float) -> Reply:
    if connection.cancelled.is_set() or (
        connection.cancellation is not None and connection.cancellation.poll()
    ):
        return Reply(failure="cancelled")
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return Reply(failure="timeout")
    transport = egress_transport()
    client = httpx.Client(transport=transport, follow_redirects=False, trust_env=False)
    done = threading.Event()
    why: list[str] = []
    watcher = threading.Thread(
        target=_watch,
        args=(transport, done, connection, deadline, why),
        name="provider-attempt-watch",
        daemon=True,
    )
    watcher.start()
    if request.credentials:
        headers = dict(connection.headers)
    else:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
    if request.body is not None:
        headers["Content-Type"] = request.content_type
    try:
        with (
            client,
            client.stream(
                request.method,
                request.url,
                params=request.params,
                content=request.body,
                headers=headers,
                timeout=remaining,
            ) as response,
        ):
            reply = Reply(status=response.status_code, headers=response.headers)
            body = bytearray()
            for chunk in response.iter_bytes():
                body.extend(chunk)
                if len(body) > REPLY_MAX_BYTES:
                    return Reply(failure="too_large")
            reply.body = bytes(body)
    except httpx.TimeoutException:
        reply = Reply(failure="timeout")
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        refused = egress_refusal(exc)
        if refused is not None:
            reply = Reply(failure="refused", failure_kind=str(refused))
        else:
            # The exception's text may quote the request; only its kind is kept.
            reply = Reply(failure="transport", failure_kind=type(exc).__name__)
    finally:
        done.set()
        watcher.join()
    if why:
        # The watcher aborted this attempt: whatever the client saw, this is why.
        return Reply(failure=why[0])
    return reply


def describe(reply: Reply) -> tuple[str, str] | None:
    """(reason, description) when a reply carries no HTTP answer at all."""
    if reply.failure == "timeout":
        return "timeout", "did not answer within the deadline"
    if reply.failure == "cancelled":
        return "cancelled", "the call was cancelled while in flight"
    if reply.failure == "refused":
        return "egress_refused", f"was not contacted: {reply.failure_kind}"
    if reply.failure == "too_large":
        return "response_too_large", f"answered with a body over {REPLY_MAX_BYTES} bytes"
    if reply.failure is not None:
        return "transport_error", f"could not be reached ({reply.failure_kind})"
    assert reply.status is not None
    if 300 <= reply.status <= 399:
        return "redirect", f"answered with a redirect (HTTP {reply.status}), which is not followed"
    return None


def check_body_size(body: Any, what: str) -> None:
    if len(json.dumps(body, ensure_ascii=False).encode()) > BODY_MAX_BYTES:
        raise InvalidRequest(f"{what} is over {BODY_MAX_BYTES} bytes; send less.")
