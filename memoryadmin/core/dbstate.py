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
# The SQLSTATE of a statement cancelled, by its statement_timeout among others.
_QUERY_CANCELED = "57014"


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


def statement_timed_out(exc: BaseException | None) -> bool:
    """A statement PostgreSQL cancelled for running past its `statement_timeout` (the
    bound of a request's statements, core/dbtimeout.py): SQLSTATE 57014, query_canceled,
    with the timeout's message (a cancel asked for says "user request")."""
    return (
        isinstance(exc, OperationalError)
        and getattr(exc.__cause__, "sqlstate", None) == _QUERY_CANCELED
        and "statement timeout" in str(exc)
    )


def unavailable_reason(exc: BaseException) -> str:
    """Why the database could not serve, in one line for the log: a statement that ran
    past its bound, or the database unavailable and the error's first line."""
    if statement_timed_out(exc):
        return f"a statement ran past its time bound (statement_timeout): {error_line(exc)}"
    return f"database unavailable: {type(exc).__name__}: {error_line(exc)}"


def unavailable_error(exc: BaseException, *, log: bool = True) -> DatabaseUnavailable:
    """The 503 every door answers while the database cannot serve, or a statement ran past
    its bound (`exc` says which: logged, unless `log` is false (the door logged it), as a
    warning of one line without a traceback, for the database is away or busy, the code
    is not wrong)."""
    if log:
        logger.warning("%s", unavailable_reason(exc))
    seconds = RETRY_AFTER_SECONDS
    what = (
        "The request took too long" if statement_timed_out(exc) else "The database is unavailable"
    )
    return DatabaseUnavailable(f"{what}; retry in {seconds} seconds.", retry_after=seconds)


def unavailable_answer(
    exc: BaseException, *, log: bool = True
) -> tuple[dict[str, Any], dict[str, str]]:
    """The body (the error envelope) and headers of that 503 (`unavailable_error`)."""
    error = unavailable_error(exc, log=log)
    return envelope_of(error), error.headers()
