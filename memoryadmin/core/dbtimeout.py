"""How long one database statement may run, and the reads allowed longer.

Processes that serve requests connect to PostgreSQL with a `statement_timeout`
(MEMORYADMIN_STATEMENT_TIMEOUT_SECONDS, memoryadmin/settings.py): a statement past it
is cancelled, and its request answered 503 as while the database cannot serve
(core/dbstate.py). A download's reads scale with the project's data and are bounded
by their own deadline instead (MEMORYADMIN_EXPORT_SECONDS): each runs in a transaction
whose statements may run that long (`long_read`). The worker and the commands have no
timeout, and nothing here gives them one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import connection, transaction

from memoryadmin.core.rows import database_vendor


def statements_may_run(seconds: float) -> None:
    """Inside a transaction on PostgreSQL: each of its statements from here on may run
    `seconds` where this process bounds them less (SET LOCAL, until the transaction
    ends). Nothing where there is no bound (the worker, the commands) or on SQLite."""
    bound = float(settings.MEMORYADMIN_STATEMENT_TIMEOUT_SECONDS)
    if bound <= 0 or seconds <= bound or database_vendor() != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('statement_timeout', %s, true)", [str(round(seconds * 1000))]
        )


@contextmanager
def long_read(seconds: float) -> Iterator[None]:
    """A read that may take `seconds` in all (a download, within its deadline): on
    PostgreSQL one transaction whose statements may each run that long, so that a
    server-side cursor is fetched in statements of its own as the read goes (outside a
    transaction its whole result would be made at once, by a commit no timeout bounds).
    On SQLite no transaction: one would hold every writer for as long."""
    if database_vendor() != "postgresql":
        yield
        return
    with transaction.atomic():
        statements_may_run(seconds)
        yield
