"""Endpoints and deliveries as the API, the CLI and the page show them (never the secret)."""

from __future__ import annotations

from typing import Any

from memoryadmin.memory.representations import iso_ms
from memoryadmin.webhooks.models import Delivery, Endpoint


def endpoint_dict(endpoint: Endpoint) -> dict[str, Any]:
    return {
        "id": endpoint.pk,
        "url": endpoint.url,
        "events": endpoint.event_list,
        "description": endpoint.description,
        "active": endpoint.active,
        "createdAt": iso_ms(endpoint.created_at),
    }


def delivery_dict(delivery: Delivery) -> dict[str, Any]:
    def when(value: Any) -> str | None:
        return iso_ms(value) if value is not None else None

    return {
        "id": delivery.pk,
        "eventId": delivery.event_id,
        "event": delivery.event,
        "state": delivery.state,
        "attempts": delivery.attempts,
        "responseCode": delivery.response_code,
        "error": delivery.last_error,
        # What was sent (the signed JSON) and the first KiB of the receiver's last reply.
        "body": delivery.body,
        "responseExcerpt": delivery.response_excerpt,
        "createdAt": iso_ms(delivery.created_at),
        "lastAttemptAt": when(delivery.last_attempt_at),
        "nextAttemptAt": when(delivery.next_attempt_at) if delivery.state == "pending" else None,
        "deliveredAt": when(delivery.delivered_at),
    }
