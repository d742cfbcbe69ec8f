"""The rules every provider call follows, for http and external providers alike, once
(spec 000): an operation is sent at most three times within one deadline, retried only
after a transport failure, 408, 429 or 5xx, and only when the operation may be repeated,
after 250 ms and then 1 s unless the provider's Retry-After fits the deadline;
credentials come from managed secrets bound to the origin the call goes to; what goes
wrong is logged and audited (`provider.failed`) with its details, while callers learn
only which resource failed and whether trying again may help.

Each attempt is core/exchange.py's (egress, TLS, no redirects, the deadline and the size
limit of every outbound call). How an attempt is stopped when its caller cancels differs
between the two clients (providers/client.py, external/transport.py) and stays with them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.views.decorators.debug import sensitive_variables

from memoryadmin.core.cancellation import POLL_SECONDS
from memoryadmin.core.exchange import Reply, retry_after
from memoryadmin.memory.models import Resource
from memoryadmin.memory.services.audit import audit_record
from memoryadmin.providers.declarations import credential_header
from memoryadmin.providers.errors import SecretNotBound, SecretNotFound
from memoryadmin.providers.services.secrets import secret_for_request

logger = logging.getLogger(__name__)

# The waits before the second and the third attempt.
RETRY_DELAYS: tuple[float, ...] = (0.25, 1.0)
# Who the audit log names for what provider calls record.
AUDIT_ACTOR = "system:providers"


# Sending: one attempt is core/exchange.py's `Outbound.send`; here, how many.


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
    starts. `stopped`, asked before each attempt and throughout the wait between
    attempts, says whether the caller cancelled: then the reply is `cancelled`. An
    attempt cut short by the caller returns a `cancelled` reply itself, which is final.
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
        if delay is None or not _backoff(delay, deadline, cancelled=cancelled, stopped=stopped):
            return reply


def _backoff(
    delay: float, deadline: float, *, cancelled: threading.Event, stopped: Callable[[], bool]
) -> bool:
    """The wait before the next attempt: True when it ran its course or the caller
    cancelled (asked every POLL_SECONDS, so the call ends cancelled at once, not when the
    wait would have ended), False when the answer is no longer wanted or the deadline came."""
    end = min(time.monotonic() + delay, deadline)
    while not stopped():
        remaining = end - time.monotonic()
        if remaining <= 0:
            return time.monotonic() < deadline
        if cancelled.wait(min(remaining, POLL_SECONDS)):
            return False
    return True


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
