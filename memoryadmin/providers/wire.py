"""One exchange with a provider over HTTP, for http and external providers alike.

The rules every provider call follows live here once (spec 000): an
operation is sent at most three times within one deadline, retried only
after a transport failure, 408, 429 or 5xx, and only when the operation may
be repeated, after 250 ms and then 1 s unless the provider's Retry-After
fits the deadline; redirects are never followed; an answer is read only up
to its size limit and only until the deadline; credentials come from
managed secrets bound to the origin the call goes to; what goes wrong is
logged and audited (`provider.failed`) with its details, while callers learn
only which resource failed and whether trying again may help.

How an attempt is stopped when its caller cancels differs between the two
clients (providers/client.py, external/transport.py) and stays with them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from django.views.decorators.debug import sensitive_variables

from memoryadmin.core.errors import DomainError, LimitExceeded
from memoryadmin.core.inputs import whole_number
from memoryadmin.core.jsonbody import body_read, json_parse
from memoryadmin.core.watchdog import cut_at
from memoryadmin.memory.models import Resource
from memoryadmin.memory.services.audit import audit_record
from memoryadmin.providers.declarations import credential_header
from memoryadmin.providers.errors import SecretNotBound, SecretNotFound
from memoryadmin.providers.services.secrets import secret_for_request

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger(__name__)

RETRYABLE_STATUSES = {408, 429}
# The waits before the second and the third attempt.
RETRY_DELAYS: tuple[float, ...] = (0.25, 1.0)
# A longer Retry-After counts as this many seconds (RFC 9111's largest delta-seconds).
RETRY_AFTER_MAX = 2**31
# Who the audit log names for what provider calls record.
AUDIT_ACTOR = "system:providers"


def _no_headers() -> httpx.Headers:
    # httpx is imported when a provider is first called, not when its kind registers.
    import httpx

    return httpx.Headers()


@dataclass
class Reply:
    """What one operation got back: an HTTP answer, or why there is none."""

    status: int | None = None
    headers: httpx.Headers = field(default_factory=_no_headers)
    body: bytes = b""
    # "timeout" or "transport" when no complete answer arrived, "refused" when the
    # egress rule stopped the connection before it was attempted, "cancelled" when
    # the caller cancelled.
    failure: str | None = None
    failure_kind: str = ""
    # The answer's body was over the limit it was read with (and not kept).
    oversize: bool = False
    attempts: int = 1

    @property
    def retryable(self) -> bool:
        if self.failure is not None:
            return self.failure in {"timeout", "transport"}
        assert self.status is not None
        return self.status in RETRYABLE_STATUSES or 500 <= self.status <= 599

    def json(self, *, suffixed: bool = False) -> Any:
        """The body's JSON document; ValueError naming the problem otherwise.

        The content type must be application/json, or with `suffixed` any
        `+json` type (application/problem+json).
        """
        media = self.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json" and not (suffixed and media.endswith("+json")):
            raise ValueError(f"the content type is {media or 'missing'}, not application/json")
        try:
            return json_parse(self.body)
        except DomainError as exc:
            # The reader speaks to API callers; here the provider is at fault.
            raise ValueError(exc.message[:1].lower() + exc.message[1:].rstrip(".")) from exc


# Sending.


class _Late(Exception):
    """The deadline passed while an answer was still arriving."""


def _until(deadline: float, chunks: Iterator[bytes]) -> Iterator[bytes]:
    for chunk in chunks:
        yield chunk
        # An answer that trickles in must still end by the deadline.
        if time.monotonic() > deadline:
            raise _Late()


def receive(
    client: httpx.Client,
    method: str,
    url: str,
    *,
    headers: dict[str, str],
    deadline: float,
    limit: int,
    params: dict[str, str] | None = None,
    content: bytes | None = None,
    cut: Callable[[], None] | None = None,
) -> Reply:
    """One attempt: sends the request and reads the answer, within what is left of the
    deadline and up to `limit` bytes of body.

    Socket timeouts count per read, so a peer sending its headers or body a byte
    at a time could outlast them: `cut` (the transport's abort) closes the
    connection at the deadline, and the reply is then a timeout.
    """
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return Reply(failure="timeout")
    guard = cut_at(deadline, cut) if cut is not None else contextlib.nullcontext()
    with guard as watched:
        stream = client.stream(
            method, url, params=params, content=content, headers=headers, timeout=remaining
        )
        reply = _read(stream, deadline=deadline, limit=limit)
    if watched is not None and watched.fired:
        return Reply(failure="timeout")
    return reply


def _read(
    stream: contextlib.AbstractContextManager[httpx.Response], *, deadline: float, limit: int
) -> Reply:
    """Opens `stream` (the request is sent) and reads its answer."""
    import httpx

    from memoryadmin.core.egress import egress_refusal

    try:
        with stream as response:
            reply = Reply(status=response.status_code, headers=response.headers)
            declared = response.headers.get("content-length")
            try:
                reply.body = body_read(
                    _until(deadline, response.iter_bytes()), declared=declared, limit=limit
                )
            except LimitExceeded:
                reply.oversize = True
            except _Late:
                return Reply(failure="timeout")
            return reply
    except httpx.TimeoutException:
        return Reply(failure="timeout")
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        refused = egress_refusal(exc)
        if refused is not None:
            return Reply(failure="refused", failure_kind=str(refused))
        # The exception's text may quote the request; only its kind is kept.
        return Reply(failure="transport", failure_kind=type(exc).__name__)


def retry_after(headers: httpx.Headers) -> float | None:
    """A valid Retry-After (delta-seconds or HTTP-date) in seconds, else None: a
    malformed one (Unicode digits, a sign, a fraction) is as if there were none."""
    raw = headers.get("retry-after", "").strip()
    if not raw or not raw.isascii():  # an HTTP-date's int() would read Unicode digits too
        return None
    seconds = whole_number(raw, maximum=RETRY_AFTER_MAX, clamp=True)
    if seconds is not None:
        return float(seconds)
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def retry_delay(reply: Reply, default: float, deadline: float) -> float | None:
    """How long to wait before the next attempt, or None when it would not fit the deadline."""
    now = time.monotonic()
    requested = retry_after(reply.headers) if reply.failure is None else None
    if requested is not None and now + requested < deadline:
        return requested
    if now + default < deadline:
        return default
    return None


def exchange(
    attempt: Callable[[], Reply],
    *,
    retryable: bool,
    deadline: float,
    retry_delays: Sequence[float] = RETRY_DELAYS,
    cancelled: threading.Event | None = None,
    stopped: Callable[[], bool] = lambda: False,
) -> Reply:
    """Runs `attempt` until an answer is final; the last reply, with its attempt count.

    Once `cancelled` is set (the answer is no longer wanted) no further attempt
    starts. `stopped`, asked before each attempt, says whether the caller
    cancelled: then the reply is `cancelled`. An attempt cut short by the
    caller returns a `cancelled` reply itself, which is final.
    """
    cancelled = cancelled or threading.Event()
    attempts = 0
    while True:
        if stopped():
            return Reply(failure="cancelled", attempts=attempts)
        attempts += 1
        reply = attempt()
        reply.attempts = attempts
        if not retryable or not reply.retryable or attempts > len(retry_delays):
            return reply
        delay = retry_delay(reply, retry_delays[attempts - 1], deadline)
        if delay is None or cancelled.wait(delay):
            return reply


# Reading.


def unusable(reply: Reply, limit: int) -> tuple[str, str] | None:
    """(reason, description) when a reply carries no answer that can be read."""
    if reply.failure == "timeout":
        return "timeout", "did not answer within the deadline"
    if reply.failure == "cancelled":
        return "cancelled", "was not waited for: its caller cancelled the call"
    if reply.failure == "refused":
        return "egress_refused", f"was not contacted: {reply.failure_kind}"
    if reply.failure is not None:
        return "transport_error", f"could not be reached ({reply.failure_kind})"
    if reply.oversize:
        return "response_too_large", f"answered with a body over {limit} bytes"
    assert reply.status is not None
    if 300 <= reply.status <= 399:
        return "redirect", f"answered with a redirect (HTTP {reply.status}), which is not followed"
    return None


# Credentials.


class Misconfigured(Exception):
    """The declaration cannot be used as it stands; nothing was sent."""

    def __init__(self, reason: str, description: str) -> None:
        super().__init__(description)
        self.reason = reason
        self.description = description


@sensitive_variables("secret")
def secret_value(resource: Resource, name: str, *, origin: str, path: str) -> str:
    """A managed secret's value for a call to `origin` and `path`; Misconfigured when it
    is not set, or not bound to where the call goes."""
    try:
        secret = secret_for_request(
            project_id=resource.project_id,
            environment=resource.environment,
            name=name,
            origin=origin,
            path=path,
        )
    except SecretNotFound as exc:
        raise Misconfigured("secret_missing", exc.message) from None
    except SecretNotBound as exc:
        raise Misconfigured("secret_not_bound", exc.message) from None
    return secret


@sensitive_variables("secret")
def header_value(
    resource: Resource, name: str, value: str | dict[str, str], *, origin: str, path: str
) -> str:
    """A declared header's value: a literal, or a managed secret bound to `origin`
    (with its scheme, such as Bearer).

    A credential written as a literal (declared before credentials had to be
    secrets) is Misconfigured, as is a secret that secret_value refuses.
    """
    if isinstance(value, str):
        if credential_header(name):
            raise Misconfigured(
                "invalid_configuration", f"header {name} is a credential written as a literal"
            )
        return value
    try:
        secret = secret_value(resource, value["secret"], origin=origin, path=path)
    except Misconfigured as exc:
        raise Misconfigured(exc.reason, f"header {name}: {exc.description}") from None
    scheme = value.get("scheme")
    return f"{scheme} {secret}" if scheme else secret


# Failures: generic to the caller, detailed in the server log and the audit log.


def failure_record(resource: Resource, detail: dict[str, Any]) -> None:
    """Audits a failed call's details (operation, reason, description, attempts, status)."""
    audit_record(
        project_id=resource.project_id,
        environment=resource.environment,
        actor=AUDIT_ACTOR,
        action="provider.failed",
        resource_id=resource.resource_id,
        detail=detail,
    )


def failure_logged(
    resource: Resource,
    *,
    operation: str,
    reason: str,
    description: str,
    attempts: int,
    status: int | None = None,
    operation_id: str | None = None,
) -> dict[str, Any]:
    """Logs a failed call's details for the operators (never a header value) and
    returns them as its audit entry records them (failure_record)."""
    detail: dict[str, Any] = {"operation": operation}
    if operation_id is not None:
        detail["operationId"] = operation_id
    detail.update(reason=reason, description=description, attempts=attempts)
    if status is not None:
        detail["status"] = status
    logger.warning(
        "memory provider call failed: resource=%s operation=%s%s reason=%s attempts=%d: %s",
        resource,
        operation,
        "" if operation_id is None else f" operation_id={operation_id}",
        reason,
        attempts,
        description,
    )
    return detail


def failure_message(resource_id: str, *, retryable: bool) -> str:
    """What a caller or model is told: which resource failed and whether to try again."""
    if retryable:
        return f"The memory provider of '{resource_id}' failed; trying again later may succeed."
    return (
        f"The memory provider of '{resource_id}' failed; trying again will not help until "
        "its owners fix it (the audit log has the details)."
    )
