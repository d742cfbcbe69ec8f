"""Django's database sessions (`SESSION_ENGINE`), read with SQL built once per process.

Every Memory page reads its session first; composing that look-up with the
ORM cost about as much as the database took to answer it. The rows, their
expiry, writes, logout (`flush`) and `clearsessions` are Django's own: only
the read differs, and it asks the same question (the key's row, unexpired),
with the page's user and what the page reads with them when this instance saw the
session name that user before (`memoryadmin.web.auth.user_reader`).

The session names the backend of its user as Django's ModelBackend, the name every
version of the product stores; this one reads it as its subclass UserBackend
(memoryadmin.web.auth), which reads the user with SQL built once.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends import db
from django.core.exceptions import ValidationError
from django.core.signing import JSONSerializer
from django.db import DEFAULT_DB_ALIAS, connections, router
from django.utils import timezone

from memoryadmin.web.auth import STORED_BACKEND, USER_BACKEND, SessionLookup, user_reader


@functools.cache
def _lookup_sql(alias: str, table: str, data: str, key: str, expiry: str) -> tuple[str, str, str]:
    """The session's read as parts of a query (SessionLookup): its text, its table as
    `s`, and the condition that picks the key's row, unexpired."""
    quote = connections[alias].ops.quote_name
    return (
        f"s.{quote(data)}",
        f"{quote(table)} s",
        f"s.{quote(key)} = %s AND s.{quote(expiry)} > %s",
    )


@functools.cache
def _select_sql(alias: str, table: str, data: str, key: str, expiry: str) -> str:
    data_sql, source, where = _lookup_sql(alias, table, data, key, expiry)
    return f"SELECT {data_sql} FROM {source} WHERE {where}"


# The user each session named when it was last read here, by session key: a page's
# user is then read in the session's own query (`user_reader`). Only a guess for that
# query: what it read is used only when the session it returned names the same user.
_USERS_MAX = 1024
_users: dict[str, Any] = {}


def _user_of(data: dict[str, Any]) -> Any:
    """The user id a session's data names, as Django's auth reads it (None: none)."""
    value = data.get(SESSION_KEY)
    if value is None:
        return None
    try:
        return get_user_model()._meta.pk.to_python(value)
    except ValidationError:
        return None


def _remember_user(key: str | None, data: dict[str, Any]) -> None:
    user = _user_of(data)
    if key is None or user is None:
        _users.pop(key or "", None)
    elif _users.get(key) != user:
        if len(_users) >= _USERS_MAX:
            _users.clear()
        _users[key] = user


# Sessions decoded before, by their stored text and the secrets that signed it: the
# JSON of what Django's decode returned. A page's session is the same text from one
# request to the next, and checking its signature cost more than the rest of the read.
_DECODED_MAX = 1024
_decoded: dict[tuple[Any, ...], str] = {}


class SessionStore(db.SessionStore):
    def decode(self, session_data: bytes | str) -> dict[str, Any]:
        """Django's decode, remembered for a session that decoded: the same text signed
        with the same secrets always decodes to the same data (each read gets its own
        copy). One that does not decode is checked (and logged) again each time."""
        if self.serializer is not JSONSerializer:
            return super().decode(session_data)
        key = (
            session_data,
            self.key_salt,
            settings.SECRET_KEY,
            *settings.SECRET_KEY_FALLBACKS,
        )
        known = _decoded.get(key)
        if known is not None:
            data: dict[str, Any] = json.loads(known)
            return data
        data = super().decode(session_data)
        if data:
            if len(_decoded) >= _DECODED_MAX:
                _decoded.clear()
            _decoded[key] = json.dumps(data)
        return data

    def load(self) -> dict[str, Any]:
        model = self.model
        alias = router.db_for_read(model)
        connection = connections[alias]
        meta = model._meta
        names = (
            alias,
            meta.db_table,
            meta.get_field("session_data").column,
            meta.get_field("session_key").column,
            meta.get_field("expire_date").column,
        )
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        key = self.session_key
        reader = user_reader()
        # The user this session named last time, read with it in one query by the page's
        # reader (which reads the default database).
        known = None if reader is None or alias != DEFAULT_DB_ALIAS else _users.get(key or "")
        row: tuple[Any, ...] | None
        if reader is not None and known is not None:
            lookup = SessionLookup(*_lookup_sql(*names), params=(key, now))
            text = reader.read_with_session(lookup, known)
            row = None if text is None else (text,)
        else:
            with connection.cursor() as cursor:
                cursor.execute(_select_sql(*names), [key, now])
                row = cursor.fetchone()
        if row is None:
            # As Django's: a missing or expired session forgets its key (a new one
            # is made if anything is stored).
            _users.pop(key or "", None)
            self._session_key = None
            return {}
        data = self.decode(row[0])
        _remember_user(key, data)
        if data.get(BACKEND_SESSION_KEY) == STORED_BACKEND:
            data[BACKEND_SESSION_KEY] = USER_BACKEND
        return data

    def encode(self, session_dict: dict[str, Any]) -> str:
        if session_dict.get(BACKEND_SESSION_KEY) == USER_BACKEND:
            session_dict = {**session_dict, BACKEND_SESSION_KEY: STORED_BACKEND}
        return super().encode(session_dict)
