"""Parsing of the conditional request headers (If-Match, If-None-Match)."""

from __future__ import annotations

import re

from rest_framework.request import Request

from memoryadmin.core.errors import InvalidRequest, PreconditionFailed, PreconditionRequired

STRONG_ETAG_RE = re.compile(r'"([\x21\x23-\x7e]+)"')


def etag(revision: str) -> str:
    return f'"{revision}"'


def required_if_match(request: Request) -> str:
    """The revision named by If-Match: exactly one strong, quoted entity tag."""
    named = optional_if_match(request)
    if named is None:
        raise PreconditionRequired('This change needs an If-Match: "<revision>" header.')
    return named


def optional_if_match(request: Request) -> str | None:
    """The revision named by If-Match, where the request has one (as `required_if_match`)."""
    raw = request._request.META.get("HTTP_IF_MATCH")
    if raw is None:
        return None
    value = raw.strip()
    if value == "*":
        raise InvalidRequest("If-Match: * is not accepted; send the quoted revision you read.")
    match = STRONG_ETAG_RE.fullmatch(value)
    if match is None:
        raise PreconditionFailed(
            "If-Match must carry exactly one quoted revision, as returned in ETag."
        )
    return match.group(1)


def put_mode(request: Request) -> str | None:
    """'create' for If-None-Match: *, 'replace' for If-Match, else 428."""
    meta = request._request.META  # not through DRF's proxy, which fails over to it
    if_none_match = meta.get("HTTP_IF_NONE_MATCH")
    if if_none_match is not None:
        if if_none_match.strip() != "*":
            raise InvalidRequest("Create needs If-None-Match: * exactly.")
        if "HTTP_IF_MATCH" in meta:
            raise InvalidRequest(
                "Send If-None-Match: * to create or If-Match to replace, not both."
            )
        return "create"
    if "HTTP_IF_MATCH" in meta:
        return "replace"
    raise PreconditionRequired(
        'PUT needs If-None-Match: * to create or If-Match: "<revision>" to replace.'
    )
