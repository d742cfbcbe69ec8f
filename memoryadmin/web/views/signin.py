"""Logging in and setting a password: Django's views, with a form that does not
validate answered as every other page form's (422, docs/decisions.md)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import views as auth_views
from django.http import HttpResponse

from memoryadmin.web.views.base import INVALID


class _InvalidFormStatus:
    def form_invalid(self, form: Any) -> HttpResponse:
        response: HttpResponse = super().form_invalid(form)  # type: ignore[misc]
        response.status_code = INVALID
        return response


class LoginView(_InvalidFormStatus, auth_views.LoginView):
    pass


class PasswordSetView(_InvalidFormStatus, auth_views.PasswordResetConfirmView):
    pass
