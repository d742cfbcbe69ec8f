"""What a database error says about the database's state, for every door that answers it."""

from __future__ import annotations

from django.db import DatabaseError

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
