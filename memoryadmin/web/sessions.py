"""Django's database sessions (`SESSION_ENGINE`), read with SQL built once per process.

Every Memory page reads its session first; composing that look-up with the
ORM cost about as much as the database took to answer it. The rows, their
expiry, writes, logout (`flush`) and `clearsessions` are Django's own: only
the read differs, and it asks the same question (the key's row, unexpired).

The session names the backend of its user as Django's ModelBackend, the name every
version of the product stores; this one reads it as its subclass UserBackend
(memoryadmin.web.auth), which reads the user with SQL built once.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY
from django.contrib.sessions.backends import db
from django.core.signing import JSONSerializer
from django.db import connections, router
from django.utils import timezone

from memoryadmin.web.auth import STORED_BACKEND, USER_BACKEND


@functools.cache
def _select_sql(alias: str, table: str, data: str, key: str, expiry: str) -> str:
    quote = connections[alias].ops.quote_name
    return (
        f"SELECT {quote(data)} FROM {quote(table)} WHERE {quote(key)} = %s AND {quote(expiry)} > %s"
    )


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
        sql = _select_sql(
            alias,
            meta.db_table,
            meta.get_field("session_data").column,
            meta.get_field("session_key").column,
            meta.get_field("expire_date").column,
        )
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        with connection.cursor() as cursor:
            cursor.execute(sql, [self.session_key, now])
            row = cursor.fetchone()
        if row is None:
            # As Django's: a missing or expired session forgets its key (a new one
            # is made if anything is stored).
            self._session_key = None
            return {}
        data = self.decode(row[0])
        if data.get(BACKEND_SESSION_KEY) == STORED_BACKEND:
            data[BACKEND_SESSION_KEY] = USER_BACKEND
        return data

    def encode(self, session_dict: dict[str, Any]) -> str:
        if session_dict.get(BACKEND_SESSION_KEY) == USER_BACKEND:
            session_dict = {**session_dict, BACKEND_SESSION_KEY: STORED_BACKEND}
        return super().encode(session_dict)
