"""The database's clock, for every time that processes on several hosts compare: a
lease's end, a due time, a slot's or a claim's expiry. Written and compared inside the
statement (`Now()`: the statement's time on PostgreSQL, `'now'` on SQLite), so hosts
whose clocks differ agree on who holds what. Times that only record when something
happened stay the host's."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Expression
from django.db.models.functions import Now


def db_now() -> Expression:
    """The database's time now, for a statement."""
    return Now()


def db_after(seconds: float | timedelta) -> Expression:
    """The database's time now plus `seconds` (negative: before now), for a statement."""
    delta = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
    return Now() + delta
