"""The Deployments page: the active deployment of each agent in this environment with its
memory declarations, every deployment of the project (promote an earlier one, owners), and
the environment's provider secrets (names and origins; values are never shown)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from memoryadmin.core.errors import DomainError
from memoryadmin.memory.services.deployments import (
    declarations_public,
    deployment_active_in,
    deployment_get,
    deployment_list,
    deployment_promote,
)
from memoryadmin.providers.services.secrets import secret_list, secret_set
from memoryadmin.web.forms import SecretForm
from memoryadmin.web.services.deployments import deployments_active
from memoryadmin.web.services.roles import DEPLOY, READ, SECRETS
from memoryadmin.web.views.base import INVALID, Page, actor, page_render, project_view


def _render(
    request: HttpRequest, page: Page, *, form: SecretForm | None = None, status: int = 200
) -> HttpResponseBase:
    # The history a page at a time, newest first; "load more" asks for the next.
    cursor = (request.GET.get("cursor") or None) if request.method == "GET" else None
    deployments, next_cursor = deployment_list(project=page.project, cursor=cursor)
    context: dict[str, Any] = {
        "deployments": deployments,
        "active_in": deployment_active_in(deployments=deployments),
        "cursor": cursor,
        "next_cursor": next_cursor,
    }
    if cursor is None:
        context["active"] = deployments_active(project=page.project, environment=page.environment)
    if page.can_manage_secrets:
        context["secrets"] = secret_list(project=page.project, environment=page.environment)
        context["secret_form"] = form or SecretForm()
    partial = "more" if cursor else None
    return page_render(
        request, "memoryadmin/deployments.html", page, context, partial=partial, status=status
    )


@require_GET
@project_view(READ)
def deployments(request: HttpRequest, page: Page) -> HttpResponseBase:
    return _render(request, page)


@require_GET
@project_view(READ)
def deployment(request: HttpRequest, page: Page, deployment_id: str) -> HttpResponseBase:
    found = deployment_get(project=page.project, deployment_id=deployment_id)
    context = {
        "deployment": found,
        "declarations": declarations_public(found.memory),
        "active_in": deployment_active_in(deployments=[found])[found.id],
    }
    return page_render(request, "memoryadmin/deployment.html", page, context)


@require_http_methods(["GET", "POST"])
@project_view(DEPLOY)
def deployment_promote_view(
    request: HttpRequest, page: Page, deployment_id: str
) -> HttpResponseBase:
    found = deployment_get(project=page.project, deployment_id=deployment_id)
    if request.method == "GET":
        context = {"deployment": found, "declarations": declarations_public(found.memory)}
        return page_render(
            request, "memoryadmin/deployment_promote.html", page, context, partial="dialog"
        )
    try:
        deployment_promote(deployment=found, environment=page.environment, actor=actor(request))
    except DomainError as exc:
        messages.error(request, f"{found.id} was not promoted: {exc.message}")
    else:
        messages.success(
            request,
            f"{found.id} is now the active deployment of {found.agent} in {page.environment}.",
        )
    return redirect("web:deployments", page.project.id, page.environment)


@require_POST
@project_view(SECRETS)
def secret_set_view(request: HttpRequest, page: Page) -> HttpResponseBase:
    """Sets or rotates a secret; the value goes to the service and is never shown again."""
    form = SecretForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            created = secret_set(
                project=page.project,
                environment=page.environment,
                name=data["name"],
                value=data["value"],
                origins=data["origins"] or None,
                actor=actor(request),
            )
        except DomainError as exc:
            form.add_error(None, exc.message)
        else:
            verb = "Set" if created else "Rotated"
            messages.success(request, f"{verb} secret {data['name']} in {page.environment}.")
            return redirect("web:deployments", page.project.id, page.environment)
    return _render(request, page, form=form, status=INVALID)
