"""Keyset pages with opaque, signed cursors.

A cursor is signed with a salt naming the list it belongs to, so a cursor
from another resource, environment or list fails verification like a
tampered one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core import signing
from django.db import models
from django.db.models import QuerySet

from memoryadmin.core.errors import InvalidRequest
from memoryadmin.core.inputs import InvalidInput, parse_instant

INVALID = "cursor is not valid for this list."


def cursor_dump(position: list[Any], *, scope: str) -> str:
    return signing.dumps(position, salt=f"memoryadmin.cursor:{scope}")


def cursor_load(cursor: str, *, scope: str) -> list[Any]:
    try:
        position = signing.loads(cursor, salt=f"memoryadmin.cursor:{scope}")
    except signing.BadSignature as exc:
        raise InvalidRequest(INVALID) from exc
    if not isinstance(position, list):
        raise InvalidRequest(INVALID)
    return position


def _encode(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def _decode(field: Any, value: Any) -> Any:
    if isinstance(field, models.DateTimeField):
        try:
            return parse_instant(value, field="cursor")
        except InvalidInput as exc:
            raise InvalidRequest(INVALID) from exc
    if type(value) is not (int if isinstance(field, models.IntegerField) else str):
        raise InvalidRequest(INVALID)
    return value


def _lookup(key: str, *, past: bool, inclusive: bool) -> str:
    """The lookup for values past (or before) a position in the direction of `key`."""
    op = "lt" if key.startswith("-") == past else "gt"
    return f"{key.removeprefix('-')}__{op}{'e' if inclusive else ''}"


def keyset_page[R](
    rows: QuerySet[Any, R],
    *,
    order: tuple[str] | tuple[str, str],
    cursor: str | None,
    scope: str,
    limit: int,
) -> tuple[list[R], str | None]:
    """One keyset page of `rows` in `order` (Django's "-field" for descending).

    `order` is one unique field, or a field and a unique tie-breaker; the cursor
    holds the last row's values of those fields. After a cursor the page is read
    as one range plus an exclusion (not an OR of two ranges), so an index in the
    same order serves it as one range scan starting at the cursor.
    """
    names = [key.removeprefix("-") for key in order]
    if cursor is not None:
        position = cursor_load(cursor, scope=scope)
        if len(position) != len(order):
            raise InvalidRequest(INVALID)
        fields = [rows.model._meta.get_field(name) for name in names]
        values = [_decode(f, v) for f, v in zip(fields, position, strict=True)]
        if len(order) == 1:
            rows = rows.filter(**{_lookup(order[0], past=True, inclusive=False): values[0]})
        else:
            rows = rows.filter(**{_lookup(order[0], past=True, inclusive=True): values[0]})
            rows = rows.exclude(
                **{names[0]: values[0], _lookup(order[1], past=False, inclusive=True): values[1]}
            )
    page = list(rows.order_by(*order)[: limit + 1])
    if len(page) <= limit:
        return page, None
    page = page[:limit]
    last: Any = page[-1]
    position = [_encode(last[n] if isinstance(last, dict) else getattr(last, n)) for n in names]
    return page, cursor_dump(position, scope=scope)
