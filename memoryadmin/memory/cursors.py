"""Opaque, signed pagination cursors.

A cursor is signed with a salt naming the list it belongs to, so a cursor
from another resource, environment or list fails verification like a
tampered one.
"""

from __future__ import annotations

from typing import Any

from django.core import signing
from django.db.models import Model, QuerySet

from memoryadmin.memory.errors import InvalidRequest


def cursor_dump(position: list[Any], *, scope: str) -> str:
    return signing.dumps(position, salt=f"memoryadmin.cursor:{scope}")


def cursor_load(cursor: str, *, scope: str) -> list[Any]:
    try:
        position = signing.loads(cursor, salt=f"memoryadmin.cursor:{scope}")
    except signing.BadSignature as exc:
        raise InvalidRequest("cursor is not valid for this list.") from exc
    if not isinstance(position, list):
        raise InvalidRequest("cursor is not valid for this list.")
    return position


def newest_first_page[M: Model](
    rows: QuerySet[M], *, cursor: str | None, scope: str, limit: int
) -> tuple[list[M], str | None]:
    """One keyset page of rows in descending id (commit) order."""
    if cursor is not None:
        position = cursor_load(cursor, scope=scope)
        if len(position) != 1 or not isinstance(position[0], int):
            raise InvalidRequest("cursor is not valid for this list.")
        rows = rows.filter(id__lt=position[0])
    page = list(rows.order_by("-id")[: limit + 1])
    if len(page) <= limit:
        return page, None
    page = page[:limit]
    return page, cursor_dump([page[-1].pk], scope=scope)
