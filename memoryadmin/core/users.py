"""The signed-in user of a request, once read, without Django's lazy object."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject, empty


def user_if_read(request: HttpRequest) -> Any:
    """The request's user as itself where something has read it; None where Django's lazy
    object has not been read yet (reading it would cost a query) or there is no user."""
    user = request.__dict__.get("user")
    if isinstance(user, SimpleLazyObject):
        return None if user._wrapped is empty else user._wrapped
    return user


def user_settled(request: HttpRequest) -> None:
    """Puts the user `request.user` has read (Django's `SimpleLazyObject`) in its place, as
    itself: every attribute read through the lazy object passes through two more Python
    calls (about twenty a Memory page: 60 thousand instructions), and the lazy object's
    closure holds the request in a reference cycle. One not yet read stays lazy."""
    user = user_if_read(request)
    if user is not None:
        request.__dict__["user"] = user
