"""The signed-in user's read on every page, in SQL built once per process."""

from __future__ import annotations

import functools
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
        model = get_user_model()
        user = fetch_instance(model, _user_sql(model, connection.vendor), [user_id])
        return user if user is not None and self.user_can_authenticate(user) else None
