"""The Memory page for resources whose records live with their provider (external providers):
a namespace's records, search, a record with its history, add, edit and delete, all through
memoryadmin/agents/services/records.py."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponseBase, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from memoryadmin.agents.services import records as record_services
from memoryadmin.core.cancellation import caller_connection, client_gone_probe
from memoryadmin.core.errors import InvalidRequest, NotFound, PreconditionFailed
from memoryadmin.memory.models import Resource
from memoryadmin.memory.providers import NotSupported
from memoryadmin.web.services.roles import DELETE, EDIT, READ
from memoryadmin.web.views.base import Page, actor, page_render, project_view

QUERY_MAX = 200


def _caller_cancels(
    view: Callable[..., HttpResponseBase],
) -> Callable[..., HttpResponseBase]:
    """A browser that goes away cancels the view's provider calls, where the server can see
    it (as the API's record routes do)."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        with caller_connection(client_gone_probe(request)):
            return view(request, *args, **kwargs)

    return wrapped


def _provider_resource(page: Page, resource_id: str) -> Resource:
    """A resource whose records live with its provider: a document resource has no
    records pages (404, as for a page that does not exist)."""
    resource = page.resource(resource_id, documents=False)
    if resource.keeps_documents:
        raise NotFound(f"Resource '{resource_id}' keeps documents, not provider records.")
    return resource


def _records_url(page: Page, resource_id: str, namespace: str) -> str:
    base = reverse("web:records", args=[page.project.id, page.environment, resource_id])
    return f"{base}?{urlencode({'namespace': namespace})}"


def _record_url(page: Page, resource_id: str, namespace: str, record_id: str) -> str:
    args = [page.project.id, page.environment, resource_id, record_id]
    return f"{reverse('web:record', args=args)}?{urlencode({'namespace': namespace})}"


def _written(request: HttpRequest, result: dict[str, object], done: str) -> None:
    if result["status"] == "queued":
        messages.info(
            request,
            f"The provider queued it (operation {result['operation']}): it is not done yet.",
        )
    else:
        messages.success(request, done)


@_caller_cancels
@require_GET
@project_view(READ)
def records(request: HttpRequest, page: Page, r: str) -> HttpResponseBase:
    resource = _provider_resource(page, r)
    namespace = request.GET.get("namespace", "").strip()
    query = request.GET.get("q", "").strip()[:QUERY_MAX]
    cursor = request.GET.get("cursor") or None
    context: dict[str, object] = {
        "resource": resource,
        "namespace": namespace,
        "query": query,
        "rows": [],
        "next_cursor": None,
    }
    if namespace:
        if query:
            context["rows"] = record_services.record_search(
                resource=resource, namespace=namespace, query=query
            )
        else:
            rows, next_cursor = record_services.record_list(
                resource=resource, namespace=namespace, cursor=cursor
            )
            context.update(rows=rows, next_cursor=next_cursor)
    return page_render(request, "memoryadmin/records.html", page, context)


@_caller_cancels
@require_GET
@project_view(READ)
def record_detail(request: HttpRequest, page: Page, r: str, rec: str) -> HttpResponseBase:
    resource = _provider_resource(page, r)
    namespace = record_services.check_namespace(request.GET.get("namespace"))
    return _record_page(request, page, resource, namespace, rec)


def _record_page(
    request: HttpRequest,
    page: Page,
    resource: Resource,
    namespace: str,
    rec: str,
    *,
    changed: str = "",
    text: str | None = None,
) -> HttpResponseBase:
    """The record as its provider has it now; `changed`: an edit or delete refused because
    the record changed since its form was shown (409), the person's `text` kept in the form."""
    record = record_services.record_get(resource=resource, namespace=namespace, record_id=rec)
    history, unsupported = [], ""
    try:
        history = record_services.record_history(
            resource=resource, namespace=namespace, record_id=rec
        )
    except NotSupported as exc:
        unsupported = exc.message
    context = {
        "resource": resource,
        "namespace": namespace,
        "record": record,
        # What the edit and delete forms send back: they act only on the text shown.
        "seen": record_services.record_seen(record["text"]),
        "text": record["text"] if text is None else text,
        "changed": changed,
        "history": history,
        "history_unsupported": unsupported,
    }
    status = 409 if changed else 200
    return page_render(request, "memoryadmin/record.html", page, context, status=status)


def _seen(request: HttpRequest) -> str:
    """The fingerprint of the text the form was shown with (`record_detail`)."""
    seen = request.POST.get("seen", "")
    if not seen:
        raise InvalidRequest(
            "The form does not say which text it was shown: read the record again."
        )
    return seen


def _text(request: HttpRequest) -> str:
    text = request.POST.get("text", "")
    if not text.strip():
        raise InvalidRequest("The text is required.")
    return text


@_caller_cancels
@require_POST
@project_view(EDIT)
def record_create(request: HttpRequest, page: Page, r: str) -> HttpResponseBase:
    resource = _provider_resource(page, r)
    namespace = record_services.check_namespace(request.POST.get("namespace"))
    result = record_services.record_create(
        resource=resource, namespace=namespace, text=_text(request), actor=actor(request)
    )
    _written(request, result, "Added to the provider.")
    return HttpResponseRedirect(_records_url(page, resource.resource_id, namespace))


@_caller_cancels
@require_POST
@project_view(EDIT)
def record_edit(request: HttpRequest, page: Page, r: str, rec: str) -> HttpResponseBase:
    resource = _provider_resource(page, r)
    namespace = record_services.check_namespace(request.POST.get("namespace"))
    text = _text(request)
    try:
        result = record_services.record_update(
            resource=resource,
            namespace=namespace,
            record_id=rec,
            text=text,
            actor=actor(request),
            seen=_seen(request),
        )
    except PreconditionFailed as exc:
        return _record_page(request, page, resource, namespace, rec, changed=exc.message, text=text)
    _written(request, result, "Saved at the provider.")
    return HttpResponseRedirect(_record_url(page, resource.resource_id, namespace, rec))


@_caller_cancels
@require_POST
@project_view(DELETE)
def record_delete(request: HttpRequest, page: Page, r: str, rec: str) -> HttpResponseBase:
    resource = _provider_resource(page, r)
    namespace = record_services.check_namespace(request.POST.get("namespace"))
    try:
        result = record_services.record_delete(
            resource=resource,
            namespace=namespace,
            record_id=rec,
            actor=actor(request),
            seen=_seen(request),
        )
    except PreconditionFailed as exc:
        return _record_page(request, page, resource, namespace, rec, changed=exc.message)
    _written(request, result, f"Deleted {rec} at the provider.")
    return HttpResponseRedirect(_records_url(page, resource.resource_id, namespace))
