"""The People page (owners): who has which role on the project; grant, change and revoke
roles, and invite someone new with a set-password link or a one-time password."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from memoryadmin.core.errors import Conflict, DomainError
from memoryadmin.web.forms import InviteForm, RoleForm
from memoryadmin.web.services.roles import (
    PEOPLE,
    Invitation,
    member_get,
    members_list,
    role_grant,
    role_revoke,
    user_invite,
)
from memoryadmin.web.views.base import (
    INVALID,
    Page,
    actor,
    never_cached,
    page_render,
    project_view,
    show_once,
    take_once,
)


def _render(
    request: HttpRequest,
    page: Page,
    *,
    grant: RoleForm | None = None,
    invite: InviteForm | None = None,
    status: int = 200,
    **extra: Any,
) -> HttpResponseBase:
    context = {
        "members": members_list(project=page.project),
        "grant_form": grant or RoleForm(prefix="grant"),
        "invite_form": invite or InviteForm(prefix="invite"),
        "me": request.user.get_username(),
        **extra,
    }
    return page_render(request, "memoryadmin/people.html", page, context, status=status)


def _back(page: Page) -> HttpResponseBase:
    return redirect("web:people", page.project.id, page.environment)


@require_GET
@project_view(PEOPLE)
def people(request: HttpRequest, page: Page) -> HttpResponseBase:
    invited = take_once(request, page, "invitation")
    if invited is None:
        return _render(request, page)
    # Right after an invitation: its link or password, this once.
    link = invited.pop("link")
    response = _render(request, page, invitation=Invitation(**invited), link=link)
    return never_cached(response)


@require_POST
@project_view(PEOPLE)
def person_grant(request: HttpRequest, page: Page) -> HttpResponseBase:
    """Gives an existing user a role, or changes the role they have. A refusal is shown
    where the change was asked: beside a row's "Change role" (its form sends `row`), or
    in the "Give someone a role" box; a conflict (the only owner) is a 409."""
    form = RoleForm(request.POST, prefix="grant")
    status = INVALID
    if form.is_valid():
        data = form.cleaned_data
        try:
            role_grant(
                username=data["username"],
                project_id=page.project.id,
                role=data["role"],
                actor=actor(request),
            )
        except DomainError as exc:
            form.add_error(None, exc.message)
            # The only owner: a conflict with the project as it is, not a form's mistake.
            status = exc.status if isinstance(exc, Conflict) else INVALID
        else:
            messages.success(request, f"{data['username']} is now {data['role']}.")
            return _back(page)
    if request.POST.get("row") == "yes":
        errors = [str(error) for errors in form.errors.values() for error in errors]
        row_error = {"username": request.POST.get("grant-username", ""), "errors": errors}
        return _render(request, page, row_error=row_error, status=status)
    return _render(request, page, grant=form, status=status)


@require_POST
@project_view(PEOPLE)
def person_invite(request: HttpRequest, page: Page) -> HttpResponseBase:
    form = InviteForm(request.POST, prefix="invite")
    if not form.is_valid():
        return _render(request, page, invite=form, status=INVALID)
    data = form.cleaned_data
    try:
        invitation = user_invite(
            username=data["username"],
            project_id=page.project.id,
            role=data["role"],
            method=data["method"],
            actor=actor(request),
        )
    except DomainError as exc:
        form.add_error("username", exc.message)
        return _render(request, page, invite=form, status=INVALID)
    link = None
    if invitation.uid and invitation.token:
        link = request.build_absolute_uri(
            reverse("web:password-set", args=[invitation.uid, invitation.token])
        )
    # Shown by the page this redirects to, once: a reload invites nobody again.
    show_once(request, page, "invitation", {**asdict(invitation), "link": link})
    return _back(page)


@require_http_methods(["GET", "POST"])
@project_view(PEOPLE)
def person_revoke(request: HttpRequest, page: Page, username: str) -> HttpResponseBase:
    member_get(project=page.project, username=username)
    if request.method == "GET":
        context = {"username": username}
        return page_render(
            request, "memoryadmin/person_revoke.html", page, context, partial="dialog"
        )
    try:
        had = role_revoke(username=username, project_id=page.project.id, actor=actor(request))
    except DomainError as exc:
        messages.error(request, exc.message)
        return _back(page)
    if had:
        messages.success(request, f"{username} no longer has a role on {page.project.id}.")
    else:
        messages.info(request, f"{username} had no role on {page.project.id}.")
    return _back(page)
