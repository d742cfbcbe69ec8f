"""Opaque, signed pagination cursors.

A cursor is signed with a salt naming the list it belongs to, so a cursor
from another resource, environment or list fails verification like a
tampered one.
"""

from __future__ import annotations

from typing import Any

from django.core import signing

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
