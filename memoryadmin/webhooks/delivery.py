"""Sending deliveries: one endpoint's queue, in order, each event at most once.

`webhook_drain` (a durable job, queued with every delivery written) sends the
endpoint's oldest open delivery, then the next, until the queue is empty or
a delivery fails. A failed attempt is tried again after a pause that doubles
from `MEMORYADMIN_WEBHOOK_BACKOFF_SECONDS` (or the receiver's Retry-After, if
longer), up to `MEMORYADMIN_WEBHOOK_MAX_ATTEMPTS`; then it is kept as failed
and the queue moves on. Deliveries after it wait meanwhile, so an endpoint
hears of a document's changes in the order they were made.

A sender claims a delivery with one conditional UPDATE (attempt counted,
lease taken) and settles it with another that holds only while its claim
does: two drains of the same endpoint never send the same delivery, and a
sender that died is replaced once its lease has passed.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from datetime import timedelta

import httpx
from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from memoryadmin.core.backoff import backoff_seconds
from memoryadmin.core.egress import egress_transport
from memoryadmin.providers.wire import receive, retry_after
from memoryadmin.runner.jobs import durable, enqueue
from memoryadmin.webhooks.models import (
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


def _lease() -> timedelta:
    return timedelta(seconds=settings.MEMORYADMIN_WEBHOOK_TIMEOUT_SECONDS * 2 + 30)


def _claim_head(project: str, endpoint_id: int) -> Delivery | None:
    """The endpoint's oldest open delivery, claimed, if it is due and nobody holds it.

    When another sender holds it (or held it and died), a drain is queued for when
    its lease ends, so the queue moves on even if no later event queues one."""
    head = (
        Delivery.objects.filter(endpoint_id=endpoint_id, state__in=OPEN_DELIVERY_STATES)
        .order_by("id")
        .values_list("pk", "lease_until")
        .first()
    )
    if head is None:
        return None
    pk, held_until = head
    now = timezone.now()
    claimable = Q(state=DeliveryState.PENDING, next_attempt_at__lte=now) | Q(
        state=DeliveryState.SENDING, lease_until__lt=now
    )
    claimed = Delivery.objects.filter(claimable, pk=pk).update(
        state=DeliveryState.SENDING,
        attempts=F("attempts") + 1,
        lease_until=now + _lease(),
        last_attempt_at=now,
    )
    if not claimed:
        if held_until is not None and held_until >= now:
            enqueue(
                webhook_drain,
                project=project,
                key=f"webhook-drain-after-lease:{endpoint_id}",
                delay=(held_until - now).total_seconds() + 1,
                endpoint=endpoint_id,
            )
        return None
    return Delivery.objects.select_related("endpoint").get(pk=pk)


def _send(delivery: Delivery) -> tuple[int | None, str, float | None, str]:
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
        ATTEMPT_HEADER: str(delivery.attempts),
    }
    deadline = time.monotonic() + settings.MEMORYADMIN_WEBHOOK_TIMEOUT_SECONDS
    transport = egress_transport()
    with httpx.Client(transport=transport, follow_redirects=False, trust_env=False) as client:
        reply = receive(
            client,
            "POST",
            endpoint.url,
            headers=headers,
            content=delivery.body.encode(),
            deadline=deadline,
            limit=REPLY_MAX_BYTES,
            cut=transport.abort,
        )
    if reply.failure == "timeout":
        return None, "timed out", None, ""
    if reply.failure == "refused":
        return None, f"refused: {reply.failure_kind}", None, ""
    if reply.failure is not None:
        return None, f"could not connect ({reply.failure_kind})", None, ""
    assert reply.status is not None
    excerpt = reply_excerpt(reply.body, oversize=reply.oversize)
    if 200 <= reply.status <= 299:
        return reply.status, "", None, excerpt
    return reply.status, f"HTTP {reply.status}", retry_after(reply.headers), excerpt


def _backoff(attempts: int, retry_after: float | None) -> float:
    base = settings.MEMORYADMIN_WEBHOOK_BACKOFF_SECONDS
    return backoff_seconds(base, attempts, at_least=retry_after)


def _settle(
    delivery: Delivery, code: int | None, error: str, retry_after: float | None, excerpt: str = ""
) -> str:
    """Records the attempt: "delivered", "failed", "retry", or "lost" (our claim
    passed to another sender meanwhile, so this outcome does not count)."""
    now = timezone.now()
    mine = Delivery.objects.filter(
        pk=delivery.pk, state=DeliveryState.SENDING, attempts=delivery.attempts
    )
    changes: dict[str, object] = {
        "response_code": code,
        "last_error": error,
        "lease_until": None,
        "response_excerpt": excerpt,
    }
    if not error:
        outcome, changes = "delivered", {**changes, "state": DeliveryState.DELIVERED}
        changes["delivered_at"] = now
    elif delivery.attempts >= settings.MEMORYADMIN_WEBHOOK_MAX_ATTEMPTS:
        outcome, changes = "failed", {**changes, "state": DeliveryState.FAILED}
    else:
        pause = _backoff(delivery.attempts, retry_after)
        outcome, changes = "retry", {**changes, "state": DeliveryState.PENDING}
        changes["next_attempt_at"] = now + timedelta(seconds=pause)
    if not mine.update(**changes):
        return "lost"
    if outcome == "retry":
        enqueue(
            webhook_drain,
            project=delivery.endpoint.project_id,
            delay=pause,
            endpoint=delivery.endpoint_id,
        )
    if outcome != "delivered":
        logger.warning(
            "webhook delivery %s to endpoint %s, attempt %d: %s (%s)",
            delivery.pk,
            delivery.endpoint_id,
            delivery.attempts,
            error,
            outcome,
        )
    return outcome


@durable(max_attempts=20, atomic=False)
def webhook_drain(*, endpoint: int) -> None:
    """Sends the endpoint's due deliveries in order; stops at one to try later."""
    while True:
        project = (
            Endpoint.objects.filter(pk=endpoint, active=True)
            .values_list("project_id", flat=True)
            .first()
        )
        if project is None:
            return
        delivery = _claim_head(project, endpoint)
        if delivery is None:
            return
        try:
            code, error, retry_after, excerpt = _send(delivery)
        except Exception:
            # Whatever went wrong, the delivery is tried again on its own schedule
            # rather than left claimed by a drain that failed.
            logger.exception("webhook delivery %s could not be sent", delivery.pk)
            code, error, retry_after, excerpt = None, "could not be sent (server error)", None, ""
        if _settle(delivery, code, error, retry_after, excerpt) in {"retry", "lost"}:
            return
