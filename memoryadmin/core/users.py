"""The signed-in user of a page request, once read, in place of Django's lazy object."""

from __future__ import annotations

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject, empty


def user_settled(request: HttpRequest) -> None:
    """Puts the user `request.user` has read (Django's `SimpleLazyObject`) in its place, as
    itself: every attribute read through the lazy object passes through two more Python
    calls (about twenty a Memory page: 60 thousand instructions), and the lazy object's
    closure holds the request in a reference cycle. One not yet read stays lazy."""
    attributes = request.__dict__
    user = attributes.get("user")
    if isinstance(user, SimpleLazyObject) and user._wrapped is not empty:
        attributes["user"] = user._wrapped
