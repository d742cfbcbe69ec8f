"""A request's query string, parsed by Django once per process for each one that comes
again.

Every memory route names its environment (`?environment=development`), so nearly every
API request carries one of a handful of query strings, and Django builds a new
`QueryDict` for each request (about 4 us: a parse, a decode and a list per value).
`request.GET` is immutable, so one parse can serve every request with the same query
string: `query_share` sets it from a bounded per-process cache of Django's own
`QueryDict`s, made with the request's encoding and the field limit in force.

Only short ASCII query strings are shared (percent-encoded text is ASCII): WSGI and
ASGI hand over the same characters for those, so the parse is the one Django would
make. Anything else (and a request whose `GET` was read already) is left to Django.
A client sending a new query string each time only turns the oldest entries over.
"""

from __future__ import annotations

import functools

from django.conf import settings
from django.http import HttpRequest, QueryDict

QUERIES_KEPT = 256
QUERY_MAX_CHARS = 512


@functools.lru_cache(maxsize=QUERIES_KEPT)
def _parsed(query: str, encoding: str, max_fields: int | None) -> QueryDict:
    # `max_fields`: DATA_UPLOAD_MAX_NUMBER_FIELDS, which QueryDict reads as it parses.
    return QueryDict(query, encoding=encoding)


def query_share(request: HttpRequest) -> None:
    """Sets `request.GET` to the shared parse of its query string, where one may be
    shared (raises what Django's parse raises: TooManyFieldsSent)."""
    if "GET" in request.__dict__:
        return
    query = request.META.get("QUERY_STRING")
    if not query or len(query) > QUERY_MAX_CHARS or not query.isascii():
        return
    encoding = request.encoding or settings.DEFAULT_CHARSET
    # An immutable QueryDict, as Django's own `request.GET` (its stubs name that type).
    request.GET = _parsed(query, encoding, settings.DATA_UPLOAD_MAX_NUMBER_FIELDS)  # type: ignore[assignment]
