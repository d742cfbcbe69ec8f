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

from memoryadmin.providers.egress import egress_refusal, egress_transport
from memoryadmin.providers.wire import retry_after
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
BACKOFF_MAX = 3600.0


def signature(secret: str, timestamp: int, body: str) -> str:
    """`v1=` and the hex HMAC-SHA256, keyed by the endpoint's secret, of
    `<timestamp>.<body>` (the body exactly as sent)."""
    signed = f"{timestamp}.{body}".encode()
    return "v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def _lease() -> timedelta:
    return timedelta(seconds=settings.MEMORYADMIN_WEBHOOK_TIMEOUT_SECONDS * 2 + 30)


def _claim_head(endpoint_id: int) -> Delivery | None:
    """The endpoint's oldest open delivery, claimed, if it is due and nobody holds it."""
    head = (
        Delivery.objects.filter(endpoint_id=endpoint_id, state__in=OPEN_DELIVERY_STATES)
        .order_by("id")
        .values_list("pk", flat=True)
        .first()
    )
    if head is None:
        return None
    now = timezone.now()
    claimable = Q(state=DeliveryState.PENDING, next_attempt_at__lte=now) | Q(
        state=DeliveryState.SENDING, lease_until__lt=now
    )
    claimed = Delivery.objects.filter(claimable, pk=head).update(
        state=DeliveryState.SENDING,
        attempts=F("attempts") + 1,
        lease_until=now + _lease(),
        last_attempt_at=now,
    )
    if not claimed:
        return None
    return Delivery.objects.select_related("endpoint").get(pk=head)


def _send(delivery: Delivery) -> tuple[int | None, str, float | None]:
    """One POST: (status code or None, error text, the receiver's Retry-After)."""
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
    timeout = settings.MEMORYADMIN_WEBHOOK_TIMEOUT_SECONDS
    try:
        with httpx.Client(
            transport=egress_transport(), timeout=timeout, follow_redirects=False
        ) as client:
            response = client.post(endpoint.url, content=delivery.body.encode(), headers=headers)
    except httpx.TimeoutException:
        return None, "timed out", None
    except httpx.HTTPError as exc:
        refused = egress_refusal(exc)
        if refused is not None:
            return None, f"refused: {refused}", None
        return None, f"could not connect: {exc}"[:500], None
    if 200 <= response.status_code <= 299:
        return response.status_code, "", None
    return response.status_code, f"HTTP {response.status_code}", retry_after(response.headers)


def _backoff(attempts: int, retry_after: float | None) -> float:
    base = settings.MEMORYADMIN_WEBHOOK_BACKOFF_SECONDS
    pause = min(base * 2 ** max(attempts - 1, 0), BACKOFF_MAX)
    if retry_after is not None:
        pause = max(pause, min(retry_after, BACKOFF_MAX))
    return pause


def _settle(delivery: Delivery, code: int | None, error: str, retry_after: float | None) -> str:
    """Records the attempt: "delivered", "failed", "retry", or "lost" (our claim
    passed to another sender meanwhile, so this outcome does not count)."""
    now = timezone.now()
    mine = Delivery.objects.filter(
        pk=delivery.pk, state=DeliveryState.SENDING, attempts=delivery.attempts
    )
    changes: dict[str, object] = {"response_code": code, "last_error": error, "lease_until": None}
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
        enqueue(webhook_drain, delay=pause, endpoint=delivery.endpoint_id)
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
    while Endpoint.objects.filter(pk=endpoint, active=True).exists():
        delivery = _claim_head(endpoint)
        if delivery is None:
            return
        code, error, retry_after = _send(delivery)
        if _settle(delivery, code, error, retry_after) in {"retry", "lost"}:
            return
