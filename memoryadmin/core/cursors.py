"""Keyset pages with opaque, signed cursors.

A cursor is signed with a salt naming the list it belongs to, so a cursor
from another resource, environment or list fails verification like a
tampered one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.core import signing
from django.db import models
from django.db.models import QuerySet

from memoryadmin.core.errors import InvalidRequest
from memoryadmin.core.inputs import InvalidInput, parse_instant
from memoryadmin.core.rows import Compiled, values_rows

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


def _kind(field: Any) -> type:
    """The type of a cursor's value of `field` once decoded (and what rows.Compiled
    takes for it)."""
    if isinstance(field, models.DateTimeField):
        return datetime
    return int if isinstance(field, models.IntegerField) else str


def _decode(field: Any, value: Any) -> Any:
    kind = _kind(field)
    if kind is datetime:
        try:
            return parse_instant(value, field="cursor")
        except InvalidInput as exc:
            raise InvalidRequest(INVALID) from exc
    if type(value) is not kind:
        raise InvalidRequest(INVALID)
    return value


def _lookup(key: str, *, past: bool, inclusive: bool) -> str:
    """The lookup for values past (or before) a position in the direction of `key`."""
    op = "lt" if key.startswith("-") == past else "gt"
    return f"{key.removeprefix('-')}__{op}{'e' if inclusive else ''}"


def _position(
    model: type[models.Model], order: Sequence[str], cursor: str | None, scope: str
) -> list[Any] | None:
    """The cursor's position (the last row's values of the `order` fields), checked
    against the fields' types; None for the first page."""
    if cursor is None:
        return None
    position = cursor_load(cursor, scope=scope)
    if len(position) != len(order):
        raise InvalidRequest(INVALID)
    fields = [model._meta.get_field(key.removeprefix("-")) for key in order]
    return [_decode(f, v) for f, v in zip(fields, position, strict=True)]


def _after[Q: QuerySet[Any, Any]](rows: Q, order: Sequence[str], values: Sequence[Any]) -> Q:
    """The rows past the position `values` in `order`: one range plus an exclusion (not
    an OR of two ranges), so that an index in the same order serves it as one range scan
    starting at the position."""
    if len(order) == 1:
        return rows.filter(**{_lookup(order[0], past=True, inclusive=False): values[0]})
    first = order[0].removeprefix("-")
    rows = rows.filter(**{_lookup(order[0], past=True, inclusive=True): values[0]})
    return rows.exclude(
        **{first: values[0], _lookup(order[1], past=False, inclusive=True): values[1]}
    )


def _finished[R](
    page: list[R], order: Sequence[str], scope: str, limit: int
) -> tuple[list[R], str | None]:
    """The page of `limit` rows read with one more (which says whether another page
    follows) and the cursor of that next page."""
    if len(page) <= limit:
        return page, None
    page = page[:limit]
    last: Any = page[-1]
    names = [key.removeprefix("-") for key in order]
    position = [_encode(last[n] if isinstance(last, dict) else getattr(last, n)) for n in names]
    return page, cursor_dump(position, scope=scope)


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
    values = _position(rows.model, order, cursor, scope)
    if values is not None:
        rows = _after(rows, order, values)
    return _finished(list(rows.order_by(*order)[: limit + 1]), order, scope, limit)


class KeysetPages:
    """`keyset_page` of the querysets `build(*args)` returns (each a `QuerySet` of
    `model`), reading the fields `names` as `.values(*names)` rows: the first page's
    statement and the one past a cursor are composed by the ORM once per process
    (rows.Compiled, `kinds` the arguments' types) and run again with each call's
    arguments and position. The same conditions and order as `keyset_page`'s, for a
    list read often enough that composing its query costs more than reading it."""

    def __init__(
        self,
        build: Callable[..., QuerySet[Any, Any]],
        kinds: Sequence[Any],
        *,
        model: type[models.Model],
        names: Sequence[str],
        order: tuple[str] | tuple[str, str],
        limit: int,
    ) -> None:
        self._model, self._names, self._order, self._limit = model, tuple(names), order, limit
        count = len(kinds)
        position = [_kind(model._meta.get_field(key.removeprefix("-"))) for key in order]

        def page(rows: QuerySet[Any, Any]) -> QuerySet[Any, Any]:
            return rows.order_by(*order).values_list(*names)[: limit + 1]

        self._first = Compiled(lambda *args: page(build(*args)), kinds)
        self._next = Compiled(
            lambda *args: page(_after(build(*args[:count]), order, args[count:])),
            [*kinds, *position],
        )

    def page(
        self, *args: Any, cursor: str | None, scope: str
    ) -> tuple[list[dict[str, Any]], str | None]:
        """The page of `build(*args)` after `cursor` (a cursor of `scope`), and the next
        page's cursor (None after the last page)."""
        values = _position(self._model, self._order, cursor, scope)
        rows = self._first.rows(*args) if values is None else self._next.rows(*args, *values)
        page = values_rows(self._model, self._names, rows)
        return _finished(page, self._order, scope, self._limit)
