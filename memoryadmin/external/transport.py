"""HTTP to external providers: one connection per operation, one cancellation per attempt.

A `Connection` is made for one resource in the caller's thread: the base URL
is checked first, then the declared headers are resolved from managed
secrets bound to that origin (spec 004: validate before resolving or
attaching credentials). After that it needs no database, so provider calls
may run in worker threads.

Every attempt gets its own child cancellation, aborted when the caller
cancels or when the operation's deadline passes: the socket is shut down, so
a provider that stalls mid-answer is left at once, not at a read timeout.
Everything else is shared: each attempt is the one outbound exchange (core/exchange.py:
egress, TLS, reading answers within the deadline and the size limit), and retries,
secrets in headers and what a failure tells whom are every provider call's
(providers/wire.py).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.views.decorators.debug import sensitive_variables

from memoryadmin.core.cancellation import (
    Cancellation,
    Cancelled,
    current_cancellation,
    stop_watch,
)
from memoryadmin.core.concurrency import Deadline
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.core.exchange import Reply, outbound
from memoryadmin.core.jsonbody import BODY_MAX_BYTES
from memoryadmin.memory.models import Resource
from memoryadmin.providers import wire
from memoryadmin.providers.errors import CallFailed
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

USER_AGENT = "memoryadmin-external-provider/1"
# Largest provider answer read (list pages of hosted providers run larger
# than the protocol's 64 KiB bodies).
REPLY_MAX_BYTES = 4 * 1024 * 1024


class ExternalFailure(CallFailed):
    """An external provider's call failed (502). What callers see is generic."""

    status = 502
    code = "provider_failed"


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
        detail = failure_logged(
            resource,
            operation=operation,
            reason=reason,
            description=description,
            attempts=attempts,
            status=status,
        )
        if self.deferred is not None:
            self.deferred.append(detail)
        else:
            failure_record(resource, detail)
        retryable = reply is not None and reply.retryable
        return ExternalFailure(
            failure_message(resource.resource_id, retryable=retryable),
            resource=resource.resource_id,
            retryable=retryable,
            reason=reason,
            attempts=attempts,
            http_status=status,
        )

    def flush(self) -> None:
        """Audits the failures deferred while calls ran in other threads. A call
        abandoned after a failure that fails later is logged, not audited."""
        pending, self.deferred = self.deferred or [], []
        for detail in pending:
            failure_record(self.resource, detail)


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
        try:
            resolved[name] = header_value(
                resource, name, value, origin=origin, path=base_path or "/"
            )
        except Misconfigured as exc:
            raise connection.failure(exc.reason, exc.description, operation="connect") from None
    connection.headers = resolved
    if deadline is not None:
        connection.deadline = deadline
    if cancelled is not None:
        connection.cancelled = cancelled
    connection.cancellation = current_cancellation()
    return connection


@sensitive_variables("value")
def secret_value(connection: Connection, name: str, *, origin: str, path: str) -> str:
    """A managed secret for a call of `connection` (an account key the provider's own
    protocol sends); a failure of the call when it is not set or not bound there."""
    try:
        value = wire.secret_value(connection.resource, name, origin=origin, path=path)
    except Misconfigured as exc:
        raise connection.failure(exc.reason, exc.description, operation="connect") from None
    return value


# Sending.


def _exchange(connection: Connection, request: Request) -> Reply:
    deadline = connection.deadline.at

    def stopped() -> bool:
        return connection.cancelled.is_set() or (
            connection.cancellation is not None and connection.cancellation.poll()
        )

    return exchange(
        lambda: _attempt(connection, request, deadline),
        retryable=request.retryable,
        deadline=deadline,
        retry_delays=connection.retry_delays,
        cancelled=connection.cancelled,
        stopped=stopped,
    )


def _attempt(connection: Connection, request: Request, deadline: float) -> Reply:
    """One attempt, on a connection of its own: the watchdog cuts it at the deadline (a
    timeout), and the caller's cancellation or the calling slot's event at once."""
    if request.credentials:
        headers = dict(connection.headers)
    else:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
    if request.body is not None:
        headers["Content-Type"] = request.content_type
    why: list[str] = []
    with outbound(project=connection.resource.project_id) as out:

        def cancel() -> None:
            why.append("cancelled")
            out.abort()

        with stop_watch(cancel, cancellation=connection.cancellation, event=connection.cancelled):
            reply = out.send(
                request.method,
                request.url,
                headers=headers,
                deadline=deadline,
                limit=REPLY_MAX_BYTES,
                params=request.params,
                content=request.body,
            )
    if why:
        # The caller cancelled this attempt: whatever the client saw, this is why.
        return Reply(failure="cancelled")
    return reply


def describe(reply: Reply) -> tuple[str, str] | None:
    """(reason, description) when a reply carries no answer that can be read."""
    return unusable(reply, REPLY_MAX_BYTES)


def reply_usable(connection: Connection, reply: Reply, *, operation: str, what: str = "") -> None:
    """Nothing when `reply` carries an answer to read; otherwise why not, raised: Cancelled
    when the caller cancelled the call (whichever request of the operation it was, a token
    exchange included), the call's failure (logged and audited) for anything else.
    `what` names the request in the failure's description (the token endpoint)."""
    unreadable = describe(reply)
    if unreadable is None:
        return
    if reply.failure == "cancelled":
        raise Cancelled("The call was cancelled before the provider answered.")
    reason, description = unreadable
    raise connection.failure(
        reason, f"{what} {description}" if what else description, operation=operation, reply=reply
    )


def check_body_size(body: Any, what: str) -> None:
    if len(json.dumps(body, ensure_ascii=False).encode()) > BODY_MAX_BYTES:
        raise InvalidRequest(f"{what} is over {BODY_MAX_BYTES} bytes; send less.")
