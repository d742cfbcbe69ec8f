"""The signed-in user's read on every page, in SQL built once per process."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.db import connection
from django.db.models import Model

from memoryadmin.core.rows import column, columns, fetch_instance, table

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
            user = fetch_instance(model, _user_sql(model, connection.vendor), [user_id])
        return user if user is not None and self.user_can_authenticate(user) else None


# Reads the signed-in user's row, given its id, with whatever else the request reads
# with it (the page's role: memoryadmin.web.services.roles.PageRead).
type UserReader = Callable[[Any], Any]
_reader: ContextVar[UserReader | None] = ContextVar("memoryadmin_user_reader", default=None)


@contextmanager
def users_read_with(reader: UserReader) -> Iterator[None]:
    """Inside the block a user's first read (`request.user`) is `reader`'s: one query
    for the user and what a page needs with it. Django's checks of the session and
    the user are unchanged."""
    token = _reader.set(reader)
    try:
        yield
    finally:
        _reader.reset(token)
