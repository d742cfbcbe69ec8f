"""The Webhooks page (owners): a project's endpoints, create (the signing secret
shown once), edit, pause, rotate the secret, delete; each endpoint's recent
deliveries, and redelivery of one."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from memoryadmin.core.errors import DomainError
from memoryadmin.web.forms import WebhookForm, sentence
from memoryadmin.web.services.roles import WEBHOOKS
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
from memoryadmin.webhooks import services
from memoryadmin.webhooks.models import Endpoint


def _list(
    request: HttpRequest, page: Page, form: WebhookForm, *, status: int = 200, **extra: Any
) -> HttpResponseBase:
    context = {"endpoints": services.endpoint_list(project=page.project), "form": form, **extra}
    return page_render(request, "memoryadmin/webhooks.html", page, context, status=status)


def _detail(
    request: HttpRequest,
    page: Page,
    endpoint: Endpoint,
    form: WebhookForm | None = None,
    *,
    status: int = 200,
    **extra: Any,
) -> HttpResponseBase:
    if form is None:
        form = WebhookForm(
            initial={
                "url": endpoint.url,
                "description": endpoint.description,
                "events": endpoint.event_list,
                "active": endpoint.active,
            }
        )
    deliveries, next_cursor = services.delivery_list(
        endpoint=endpoint, cursor=request.GET.get("cursor") or None
    )
    context = {
        "endpoint": endpoint,
        "form": form,
        "queue": services.delivery_queue(endpoint=endpoint),
        "max_attempts": settings.MEMORYADMIN_WEBHOOK_MAX_ATTEMPTS,
        "keep_days": settings.MEMORYADMIN_WEBHOOK_DELIVERIES_KEEP_DAYS,
        "deliveries": deliveries,
        "next_cursor": next_cursor,
        **extra,
    }
    return page_render(request, "memoryadmin/webhook.html", page, context, status=status)


def _refused(form: WebhookForm, exc: DomainError) -> None:
    message = sentence(exc.message)
    field = next((name for name in ("url", "events", "description") if name in exc.message), None)
    form.add_error(field, message)


@require_GET
@project_view(WEBHOOKS)
def webhook_list(request: HttpRequest, page: Page) -> HttpResponseBase:
    made = take_once(request, page, "webhook")
    if made is None:
        return _list(request, page, WebhookForm())
    # Right after creating one: its signing secret, this once.
    endpoint = services.endpoint_get(project=page.project, endpoint_id=made["pk"])
    response = _list(request, page, WebhookForm(), new_endpoint=endpoint, secret=made["secret"])
    return never_cached(response)


@require_POST
@project_view(WEBHOOKS)
def webhook_create(request: HttpRequest, page: Page) -> HttpResponseBase:
    form = WebhookForm(request.POST)
    if not form.is_valid():
        return _list(request, page, form, status=INVALID)
    try:
        endpoint, secret = services.endpoint_create(
            project=page.project,
            url=form.cleaned_data["url"],
            events=form.cleaned_data["events"],
            description=form.cleaned_data["description"],
            actor=actor(request),
        )
    except DomainError as exc:
        _refused(form, exc)
        return _list(request, page, form, status=INVALID)
    # Shown by the page this redirects to, once: a reload makes no second webhook.
    show_once(request, page, "webhook", {"pk": endpoint.pk, "secret": secret})
    return redirect("web:webhooks", page.project.id, page.environment)


@require_GET
@project_view(WEBHOOKS)
def webhook_detail(request: HttpRequest, page: Page, w: int) -> HttpResponseBase:
    endpoint = services.endpoint_get(project=page.project, endpoint_id=w)
    rotated = take_once(request, page, f"webhook-secret-{endpoint.pk}")
    if rotated is None:
        return _detail(request, page, endpoint)
    # Right after a rotation: the new secret, this once.
    return never_cached(_detail(request, page, endpoint, secret=rotated["secret"]))


@require_POST
@project_view(WEBHOOKS)
def webhook_update(request: HttpRequest, page: Page, w: int) -> HttpResponseBase:
    endpoint = services.endpoint_get(project=page.project, endpoint_id=w)
    form = WebhookForm(request.POST)
    if not form.is_valid():
        return _detail(request, page, endpoint, form, status=INVALID)
    try:
        services.endpoint_update(endpoint=endpoint, actor=actor(request), **form.cleaned_data)
    except DomainError as exc:
        _refused(form, exc)
        endpoint.refresh_from_db()
        return _detail(request, page, endpoint, form, status=INVALID)
    messages.success(request, "Saved the webhook's settings.")
    return redirect("web:webhook", page.project.id, page.environment, endpoint.pk)


@require_POST
@project_view(WEBHOOKS)
def webhook_rotate(request: HttpRequest, page: Page, w: int) -> HttpResponseBase:
    endpoint = services.endpoint_get(project=page.project, endpoint_id=w)
    endpoint, secret = services.endpoint_rotate_secret(endpoint=endpoint, actor=actor(request))
    # Shown by the page this redirects to, once: a reload rotates nothing again.
    show_once(request, page, f"webhook-secret-{endpoint.pk}", {"secret": secret})
    return redirect("web:webhook", page.project.id, page.environment, endpoint.pk)


@require_http_methods(["GET", "POST"])
@project_view(WEBHOOKS)
def webhook_delete(request: HttpRequest, page: Page, w: int) -> HttpResponseBase:
    endpoint = services.endpoint_get(project=page.project, endpoint_id=w)
    if request.method == "GET":
        return page_render(
            request,
            "memoryadmin/webhook_delete.html",
            page,
            {"endpoint": endpoint},
            partial="dialog",
        )
    services.endpoint_delete(endpoint=endpoint, actor=actor(request))
    messages.success(request, f"Deleted the webhook to {endpoint.url}.")
    return redirect("web:webhooks", page.project.id, page.environment)


@require_POST
@project_view(WEBHOOKS)
def delivery_redeliver(request: HttpRequest, page: Page, w: int, d: int) -> HttpResponseBase:
    endpoint = services.endpoint_get(project=page.project, endpoint_id=w)
    delivery, queued = services.delivery_redeliver(
        endpoint=endpoint, delivery_id=d, actor=actor(request)
    )
    if queued:
        messages.success(request, f"Delivery {delivery.pk} ({delivery.event}) is queued again.")
    else:
        messages.info(request, f"Delivery {delivery.pk} is still being sent; nothing changed.")
    return redirect("web:webhook", page.project.id, page.environment, endpoint.pk)


@require_POST
@project_view(WEBHOOKS)
def webhook_test(request: HttpRequest, page: Page, w: int) -> HttpResponseBase:
    endpoint = services.endpoint_get(project=page.project, endpoint_id=w)
    delivery = services.endpoint_send_test(endpoint=endpoint, actor=actor(request))
    messages.success(
        request, f"Test event {delivery.event_id} queued: it is delivery {delivery.pk} below."
    )
    return redirect("web:webhook", page.project.id, page.environment, endpoint.pk)
