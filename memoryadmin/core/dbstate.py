"""What a database error says about the database's state, for every door that answers it."""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError, InterfaceError, OperationalError

from memoryadmin.core.errors import DomainError, envelope_of

logger = logging.getLogger(__name__)

# Seconds a client is told to wait before trying again while the database cannot serve.
RETRY_AFTER_SECONDS = 5

# SQLSTATEs of a statement naming a table or column the database does not have: a
# database that `migrate` has not brought up to date (PostgreSQL; SQLite says it in words).
_UNDEFINED_TABLE_OR_COLUMN = {"42P01", "42703"}


def schema_missing(exc: BaseException) -> bool:
    """The error of a statement that needs a table or column the database lacks: its
    migrations are not applied (a new database, or a release started before `migrate`)."""
    if not isinstance(exc, DatabaseError):
        return False
    if getattr(exc.__cause__, "sqlstate", None) in _UNDEFINED_TABLE_OR_COLUMN:
        return True
    return str(exc).startswith(("no such table:", "no such column:"))


def database_unavailable(exc: BaseException | None) -> bool:
    """An error that says the database cannot serve right now, rather than a bug: no
    connection (refused, lost, or none free in the pool within DATABASE_POOL_TIMEOUT),
    a cancelled statement, a lock or serialization failure, or a table or column its
    migrations have not made yet (PostgreSQL calls that a programming error)."""
    return isinstance(exc, OperationalError | InterfaceError) or (
        exc is not None and schema_missing(exc)
    )


class DatabaseUnavailable(DomainError):
    """The database cannot serve now: 503, and a retry after RETRY_AFTER_SECONDS."""

    status = 503
    code = "service_unavailable"


def first_line(text: str) -> str:
    """The first line of `text` with anything in it, stripped ("" for none)."""
    lines = (line.strip() for line in text.strip().splitlines())
    return next((line for line in lines if line), "")


def error_line(exc: BaseException) -> str:
    """A database error in one line: its message's first, or its type's name."""
    return first_line(str(exc)) or type(exc).__name__


def unavailable_answer(exc: BaseException) -> tuple[dict[str, Any], dict[str, str]]:
    """The body (the error envelope) and headers of the 503 every door answers while the
    database cannot serve (`exc` says why: logged as a warning, without a traceback, for
    the database is away, the code is not wrong)."""
    logger.warning("database unavailable: %s: %s", type(exc).__name__, exc)
    seconds = RETRY_AFTER_SECONDS
    error = DatabaseUnavailable(
        f"The database is unavailable; retry in {seconds} seconds.", retry_after=seconds
    )
    return envelope_of(error), error.headers()
