"""The client's address: what login lockouts count and request logs show."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def client_address(request: HttpRequest) -> str | None:
    """The address a request comes from.

    Without proxies (`MEMORYADMIN_PROXY_COUNT=0`) the socket's address: a header is
    what the client says. Behind N proxies that each append the address they saw to
    X-Forwarded-For, the client's is the Nth entry from the right; entries further
    left were written by the client and are ignored.
    """
    count = settings.MEMORYADMIN_PROXY_COUNT
    if count > 0:
        header = request.META.get("HTTP_X_FORWARDED_FOR", "")
        forwarded = [part for part in (p.strip() for p in header.split(",")) if part]
        if len(forwarded) >= count:
            return forwarded[-count][:64]
    return request.META.get("REMOTE_ADDR")
