"""Checking that a webhook delivery came from memoryadmin.

Every delivery carries `Memoryadmin-Timestamp` (Unix seconds) and
`Memoryadmin-Signature: v1=<hex>`, the HMAC-SHA256 of `<timestamp>.<body>`
keyed by the endpoint's signing secret. `verify` checks both and returns the
event; deduplicate by its `id` (the `Memoryadmin-Event-Id` header), which a
retried or redelivered delivery repeats.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["InvalidSignature", "verify"]

# A timestamp has at most this many digits (Unix seconds until the year 33658).
TIMESTAMP_MAX_DIGITS = 12


class InvalidSignature(Exception):
    """The delivery's signature or timestamp does not check out: refuse it (e.g. 400)."""


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    tolerance: float = 300,
    now: float | None = None,
) -> dict[str, Any]:
    """The event a delivery carries, if its signature is the endpoint's and its
    timestamp is within `tolerance` seconds of `now`; else InvalidSignature, for
    every missing or malformed header too."""
    lower = {name.lower(): value for name, value in headers.items()}
    timestamp = lower.get("memoryadmin-timestamp", "")
    signatures = lower.get("memoryadmin-signature", "")
    # ASCII digits only: str.isdigit() also takes "¹" (int() raises) and "٣" (int() reads 3).
    if (
        not isinstance(timestamp, str)
        or not (timestamp.isascii() and timestamp.isdigit())
        or len(timestamp) > TIMESTAMP_MAX_DIGITS
    ):
        raise InvalidSignature("missing or malformed Memoryadmin-Timestamp")
    if not isinstance(signatures, str) or not signatures.isascii():
        raise InvalidSignature("malformed Memoryadmin-Signature")
    current = time.time() if now is None else now
    if abs(current - int(timestamp)) > tolerance:
        raise InvalidSignature("the timestamp is too old or in the future")
    raw = body.encode() if isinstance(body, str) else body
    expected = hmac.new(secret.encode(), timestamp.encode() + b"." + raw, hashlib.sha256)
    wanted = "v1=" + expected.hexdigest()
    if not any(hmac.compare_digest(wanted, given.strip()) for given in signatures.split(",")):
        raise InvalidSignature("the signature does not match")
    event: dict[str, Any] = json.loads(raw)
    return event
