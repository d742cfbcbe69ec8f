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

A parameter is given once: one given more than once is refused, naming it, unless the
route takes it repeated (`given_once_check`), where the last value would otherwise win
silently. Which names a query string repeats is decided once, with its shared parse.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence

from django.conf import settings
from django.http import HttpRequest, QueryDict

from memoryadmin.core.errors import InvalidRequest

QUERIES_KEPT = 256
QUERY_MAX_CHARS = 512
# Where a shared parse keeps the names its query string repeats.
_REPEATED = "memoryadmin_repeated"


def repeated_names(lists: Iterable[tuple[str, Sequence[str]]]) -> frozenset[str]:
    """The names given more than once among a query's (name, values) pairs."""
    return frozenset(name for name, values in lists if len(values) > 1)


@functools.lru_cache(maxsize=QUERIES_KEPT)
def _parsed(query: str, encoding: str, max_fields: int | None) -> QueryDict:
    # `max_fields`: DATA_UPLOAD_MAX_NUMBER_FIELDS, which QueryDict reads as it parses.
    parsed = QueryDict(query, encoding=encoding)
    parsed.__dict__[_REPEATED] = repeated_names(parsed.lists())
    return parsed


def query_repeated(query: QueryDict) -> frozenset[str]:
    """The names `query` gives more than once: as its shared parse decided them, or
    found now for a query string that is not shared (or a copy of one)."""
    known: frozenset[str] | None = query.__dict__.get(_REPEATED)
    return repeated_names(query.lists()) if known is None else known


def given_once_check(
    query: QueryDict | Mapping[str, Sequence[str]], *, repeatable: frozenset[str] = frozenset()
) -> None:
    """Refuses a parameter given more than once (400 `invalid_request` naming it, the
    first by name) unless it is `repeatable`; `query` is a request's QueryDict or, for
    a query parsed elsewhere, each name's list of values."""
    if isinstance(query, QueryDict):
        repeated = query_repeated(query)
    else:
        repeated = repeated_names(query.items())
    if repeated and not repeated <= repeatable:
        name = min(repeated - repeatable)
        raise InvalidRequest(f"{name} must be given once.", details={"field": name})


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
