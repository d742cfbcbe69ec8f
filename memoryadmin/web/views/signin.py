"""Logging in and setting a password: Django's views, with a form that does not
validate answered as every other page form's (422, docs/decisions.md)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import views as auth_views
from django.http import HttpResponse, HttpResponseRedirect

from memoryadmin.web.services.roles import password_set_by_link
from memoryadmin.web.views.base import INVALID


class _InvalidFormStatus:
    def form_invalid(self, form: Any) -> HttpResponse:
        response: HttpResponse = super().form_invalid(form)  # type: ignore[misc]
        response.status_code = INVALID
        return response


class LoginView(_InvalidFormStatus, auth_views.LoginView):
    pass


class PasswordSetView(_InvalidFormStatus, auth_views.PasswordResetConfirmView):
    def render_to_response(self, context: dict[str, Any], **kwargs: Any) -> HttpResponse:
        if not self.validlink:
            # A dead link (used, expired, its login gone, or never one) is 404 as the
            # pages' unknown ids are, one page for all of them: neither its status nor
            # its body tells whether the login exists.
            kwargs["status"] = 404
        response: HttpResponse = super().render_to_response(context, **kwargs)
        return response

    def form_valid(self, form: Any) -> HttpResponse:
        # The link is checked again as the password is set (the check on the way in was
        # made before another use of it could finish): one use sets the password.
        session, user = self.request.session, self.user
        if user is None or not password_set_by_link(
            user_pk=user.pk,
            token=session.get(auth_views.INTERNAL_RESET_SESSION_TOKEN),
            password=form.cleaned_data["new_password1"],
        ):
            self.validlink = False
            return self.render_to_response(self.get_context_data())
        del session[auth_views.INTERNAL_RESET_SESSION_TOKEN]
        return HttpResponseRedirect(self.get_success_url())
