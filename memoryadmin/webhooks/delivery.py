"""Sending deliveries: each one a job of the runner in its endpoint's line.

A delivery is sent by `webhook_deliver`, a durable job written with the
delivery (outbox) in the endpoint's line (`line_of`): the runner sends an
endpoint's deliveries one at a time, oldest first, and a failing delivery
holds those after it, so an endpoint hears of a document's changes in the
order they were made. A failed attempt is tried again after a pause that
doubles from `MEMORYADMIN_WEBHOOK_BACKOFF_SECONDS` (or the receiver's
Retry-After, if longer), up to `MEMORYADMIN_WEBHOOK_MAX_ATTEMPTS`; then the
delivery is kept as failed and the line moves on. Claim, lease, backoff and
the dead job are the runner's; this module sends and records the outcome.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db.models import Exists, Q, QuerySet
from django.utils import timezone

from memoryadmin.core.exchange import outbound, retry_after
from memoryadmin.runner.housekeeping import records_remove
from memoryadmin.runner.jobs import (
    Postpone,
    RetryAfter,
    current_claim,
    current_job,
    durable,
    enqueue,
)
from memoryadmin.runner.models import Job
from memoryadmin.webhooks.models import (
    FINISHED_DELIVERY_STATES,
    OPEN_DELIVERY_STATES,
    Delivery,
    DeliveryState,
    Endpoint,
)

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "Memoryadmin-Signature"
TIMESTAMP_HEADER = "Memoryadmin-Timestamp"
EVENT_ID_HEADER = "Memoryadmin-Event-Id"
EVENT_TYPE_HEADER = "Memoryadmin-Event-Type"
ATTEMPT_HEADER = "Memoryadmin-Delivery-Attempt"
# How much of a receiver's answer is read: its status is what counts.
REPLY_MAX_BYTES = 64 * 1024
# How much of it the delivery keeps, for owners to see.
EXCERPT_MAX_BYTES = 1024


def reply_excerpt(body: bytes, *, oversize: bool = False) -> str:
    """The first EXCERPT_MAX_BYTES of a reply as text (a character cut at the end is
    dropped, undecodable bytes replaced)."""
    if oversize:
        return f"(the reply was over {REPLY_MAX_BYTES} bytes; not kept)"
    return body[:EXCERPT_MAX_BYTES].decode(
        "utf-8", "ignore" if len(body) > EXCERPT_MAX_BYTES else "replace"
    )


def signature(secret: str, timestamp: int, body: str) -> str:
    """`v1=` and the hex HMAC-SHA256, keyed by the endpoint's secret, of
    `<timestamp>.<body>` (the body exactly as sent)."""
    signed = f"{timestamp}.{body}".encode()
    return "v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def _send(delivery: Delivery, attempt: int) -> tuple[int | None, str, float | None, str]:
    """One POST within one overall deadline, reading at most REPLY_MAX_BYTES of the
    answer: (status code or None, error text, the receiver's Retry-After, the first
    KiB of its reply)."""
    endpoint = delivery.endpoint
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "memoryadmin-webhooks",
        EVENT_ID_HEADER: delivery.event_id,
        EVENT_TYPE_HEADER: delivery.event,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: signature(endpoint.secret, timestamp, delivery.body),
        ATTEMPT_HEADER: str(attempt),
    }
    deadline = time.monotonic() + settings.MEMORYADMIN_WEBHOOK_TIMEOUT_SECONDS
    with outbound(project=endpoint.project_id) as out:
        reply = out.send(
            "POST",
            endpoint.url,
            headers=headers,
            content=delivery.body.encode(),
            deadline=deadline,
            limit=REPLY_MAX_BYTES,
        )
    if reply.failure == "timeout":
        return None, "timed out", None, ""
    if reply.failure == "refused":
        return None, f"refused: {reply.failure_kind}", None, ""
    if reply.failure is not None:
        # The connection failed, or it was made and the reply did not arrive whole (a
        # reset, a broken or cut-short body): each told as what happened.
        if reply.failure_kind.startswith("Connect"):
            return None, f"could not connect ({reply.failure_kind})", None, ""
        return None, f"no whole reply ({reply.failure_kind})", None, ""
    assert reply.status is not None
    excerpt = reply_excerpt(reply.body, oversize=reply.oversize)
    if 200 <= reply.status <= 299:
        return reply.status, "", None, excerpt
    return reply.status, f"HTTP {reply.status}", retry_after(reply.headers), excerpt


# A paused endpoint's line waits; resuming it wakes the line at once, and this is
# only how long a delivery that raced a resume waits at most.
PAUSED_RECHECK_SECONDS = 60.0


# The runner's line of an endpoint's deliveries is this and the endpoint's id (the
# outbox's one statement builds it in SQL from the same prefix).
LINE_PREFIX = "webhook:"


def line_of(endpoint_id: int) -> str:
    """The runner's line of an endpoint's deliveries."""
    return f"{LINE_PREFIX}{endpoint_id}"


def delivery_enqueue(*, project_id: str, endpoint_id: int, event_id: str) -> Job:
    """The job that sends one delivery, in its endpoint's line (the caller's transaction)."""
    return enqueue(
        webhook_deliver,
        project=project_id,
        line=line_of(endpoint_id),
        endpoint=endpoint_id,
        event=event_id,
    )


def _lease() -> float:
    # Far beyond an attempt's deadline: a delivery is never being sent twice at once.
    return float(settings.MEMORYADMIN_WEBHOOK_TIMEOUT_SECONDS) * 2 + 30


def _given_up(job: Job) -> None:
    """Attempts ran out: the delivery is kept as failed (redeliver runs it again)."""
    Delivery.objects.filter(job_id=job.pk, state__in=OPEN_DELIVERY_STATES).update(
        state=DeliveryState.FAILED
    )


@durable(
    max_attempts=lambda: int(settings.MEMORYADMIN_WEBHOOK_MAX_ATTEMPTS),
    atomic=False,
    backoff=lambda: float(settings.MEMORYADMIN_WEBHOOK_BACKOFF_SECONDS),
    lease=_lease,
    on_dead=_given_up,
)
def webhook_deliver(*, endpoint: int, event: str) -> None:
    """One attempt of the delivery of `event` to `endpoint`; safe to run again (one
    already settled, or whose endpoint is gone or deleted, is left as it is)."""
    live = Exists(Endpoint.objects.filter(pk=endpoint))
    delivery = (
        Delivery.objects.select_related("endpoint")
        .filter(live, endpoint_id=endpoint, event_id=event, state__in=OPEN_DELIVERY_STATES)
        .first()
    )
    if delivery is None:
        return
    if not delivery.endpoint.active:
        raise Postpone(PAUSED_RECHECK_SECONDS)
    attempt = current_job().attempts
    # Each write of the delivery holds while this attempt holds its job: a worker that
    # comes back after its lease passed and another took the job over sends nothing, and
    # writes nothing over what the other one recorded (a delivered event left pending).
    rows = Delivery.objects.filter(current_claim(), pk=delivery.pk)
    # The last check before sending: an endpoint deleted since it was read is sent nothing
    # (only an attempt begun before its deletion committed may still arrive).
    if not rows.filter(live).update(state=DeliveryState.SENDING, last_attempt_at=timezone.now()):
        return
    try:
        code, error, wait, excerpt = _send(delivery, attempt)
    except Exception:
        # Whatever went wrong, the delivery is tried again on its own schedule.
        logger.exception("webhook delivery %s could not be sent", delivery.pk)
        code, error, wait, excerpt = None, "could not be sent (server error)", None, ""
    outcome = {"response_code": code, "last_error": error, "response_excerpt": excerpt}
    if not error:
        rows.update(state=DeliveryState.DELIVERED, delivered_at=timezone.now(), **outcome)
        return
    rows.update(state=DeliveryState.PENDING, **outcome)
    logger.warning(
        "webhook delivery %s to endpoint %s, attempt %d: %s",
        delivery.pk,
        endpoint,
        attempt,
        error,
    )
    raise RetryAfter(error, seconds=wait)


@durable(atomic=False)
def webhook_endpoint_purge(*, endpoint: int) -> None:
    """Removes a deleted endpoint's deliveries with their jobs (open ones too: none is
    sent once its endpoint is deleted), a batch at a time for housekeeping's budget, then
    the endpoint's row; with more left, it runs again at once (no attempt spent), so the
    worker runs other jobs between its runs. Safe to run again."""
    _, done = records_remove(Delivery.objects.filter(endpoint_id=endpoint))
    if not done:
        raise Postpone(0)
    Endpoint._base_manager.filter(pk=endpoint).exclude(deleted_at=None).delete()


def deliveries_past_keeping() -> QuerySet[Delivery] | None:
    """Delivered and failed deliveries whose last attempt (or, never attempted, whose
    event) is `MEMORYADMIN_WEBHOOK_DELIVERIES_KEEP_DAYS` old: the workers' housekeeping
    removes them, their jobs with them (None: kept for ever). An open one is never
    removed, however old; one sent again is open, then counts from its new attempt."""
    days = settings.MEMORYADMIN_WEBHOOK_DELIVERIES_KEEP_DAYS
    if not days:
        return None
    before = timezone.now() - timedelta(days=days)
    attempted = Q(last_attempt_at__lt=before) | Q(last_attempt_at=None, created_at__lt=before)
    return Delivery.objects.filter(attempted, state__in=FINISHED_DELIVERY_STATES).order_by()
