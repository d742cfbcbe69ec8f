"""The pool's check of a connection it hands out (memoryadmin/core/dbpool.py), on a
real PostgreSQL connection."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from memoryadmin.core import dbpool
from memoryadmin.settings import database_from_url

pytestmark = pytest.mark.postgres


def connect() -> psycopg.Connection[Any]:
    """A connection to the server's maintenance database (DATABASE_URL names the
    database the test databases are made from, which may not exist)."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    return psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True)


def test_the_postgres_pool_checks_connections_with_the_once_a_second_check() -> None:
    options = database_from_url("postgres://someone@db.example:5432/memoryadmin")["OPTIONS"]
    assert options["pool"]["check"] is dbpool.pool_check


def test_a_connection_is_checked_once_a_second_at_most(monkeypatch: Any) -> None:
    connection = connect()
    dbpool.pool_check(connection)  # never checked: runs the empty statement
    assert connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    # Broken behind the pool's back: within the second it is handed out unchecked ...
    connection.pgconn.finish()
    dbpool.pool_check(connection)
    # ... and once the second has passed the check finds it dead, so the pool replaces it.
    monkeypatch.setattr(dbpool, "FRESH_SECONDS", 0.0)
    with pytest.raises(psycopg.OperationalError):
        dbpool.pool_check(connection)


def test_a_dead_connection_fails_its_first_check() -> None:
    connection = connect()
    connection.pgconn.finish()
    with pytest.raises(psycopg.OperationalError):
        dbpool.pool_check(connection)
