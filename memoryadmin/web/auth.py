"""The signed-in user's read on every page, in SQL built once per process."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.db.models import Model

from memoryadmin.core.rows import column, columns, database_vendor, fetch_instance, table

# The backend sessions name, as every version of the product has stored it. Sessions
# (memoryadmin.web.sessions) read it as USER_BACKEND and write USER_BACKEND as it, so
# an instance of another version, before or after this one, accepts the session.
STORED_BACKEND = "django.contrib.auth.backends.ModelBackend"
USER_BACKEND = "memoryadmin.web.auth.UserBackend"


@functools.cache
def _user_sql(model: type[Model], vendor: str) -> str:
    key = column(model, model._meta.pk.name)
    return f"SELECT {columns(model)} FROM {table(model)} WHERE {key} = %s"


class UserBackend(ModelBackend):
    """Django's ModelBackend (passwords, permissions, active users only), reading a
    signed-in user's row with SQL built once instead of an ORM query composed per
    page: composing it cost more than the database took to answer."""

    def get_user(self, user_id: Any) -> Any:
        reader = _reader.get()
        if reader is not None:
            user: Any = reader(user_id)
        else:
            model = get_user_model()
            user = fetch_instance(model, _user_sql(model, database_vendor()), [user_id])
        return user if user is not None and self.user_can_authenticate(user) else None


@dataclass(frozen=True)
class SessionLookup:
    """The session's read (memoryadmin.web.sessions) as parts of a query, for a reader
    that reads the user in the same query: `data` is the session's text, `source` its
    table (aliased), `where` the condition on it with `params`, which picks its row."""

    data: str
    source: str
    where: str
    params: Sequence[Any]


class UserReader(Protocol):
    """Reads the signed-in user's row, given its id, with whatever else the request
    reads with it (the page's role: memoryadmin.web.services.roles.PageRead)."""

    def __call__(self, user_id: Any) -> Any: ...

    def read_with_session(self, session: SessionLookup, user_id: Any) -> Any:
        """The session's text (None: no such session), read in one query with what
        `self(user_id)` reads, which it then answers without a query of its own."""
        ...


_reader: ContextVar[UserReader | None] = ContextVar("memoryadmin_user_reader", default=None)


def user_reader() -> UserReader | None:
    """The reader of the block of `users_read_with` running now, if any."""
    return _reader.get()


@contextmanager
def users_read_with(reader: UserReader) -> Iterator[None]:
    """Inside the block a user's first read (`request.user`) is `reader`'s: one query
    for the user and what a page needs with it, and the session's own when the session
    is known to name that user (memoryadmin.web.sessions). Django's checks of the
    session and the user are unchanged."""
    token = _reader.set(reader)
    try:
        yield
    finally:
        _reader.reset(token)
