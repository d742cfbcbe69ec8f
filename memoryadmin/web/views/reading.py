"""Pages that read: project list, inventory, documents, a document, its versions, the audit log."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponseBase, QueryDict
from django.shortcuts import redirect
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_GET
from django_htmx.http import push_url

from memoryadmin.agents.services.provenance import version_readers
from memoryadmin.core.dbtimeout import long_read
from memoryadmin.core.diff import text_diff
from memoryadmin.core.environments import DEFAULT_ENVIRONMENT, Environment
from memoryadmin.core.errors import DomainError, InvalidRequest
from memoryadmin.memory.exportzip import download_response, download_slot
from memoryadmin.memory.imports import TransferBusy
from memoryadmin.memory.limits import agent_writes_shown
from memoryadmin.memory.models import Resource
from memoryadmin.memory.services.asof import document_list_as_of, parse_as_of
from memoryadmin.memory.services.audit import (
    audit_actions,
    audit_entries,
    audit_list,
    audit_record_dict,
)
from memoryadmin.memory.services.deployments import (
    inventory_count,
    resource_ids,
    resource_inventory,
)
from memoryadmin.memory.services.document_filters import NO_FACETS, DocumentFacets, document_facets
from memoryadmin.memory.services.documents import (
    document_count,
    document_get,
    document_list,
    version_get,
    version_list,
)
from memoryadmin.memory.services.keys import api_key_names
from memoryadmin.memory.services.tombstones import DocumentDeleted, document_get_or_tombstone
from memoryadmin.web.forms import AuditFilterForm
from memoryadmin.web.services.audit_files import DOWNLOADS
from memoryadmin.web.services.history import history_rows
from memoryadmin.web.services.roles import READ, membership_get, memberships_for_user
from memoryadmin.web.templatetags.memorypage import cached_reverse
from memoryadmin.web.views.base import Page, error_page, is_partial, page_render, project_view
from memoryadmin.web.views.providers import provider_resource

QUERY_MAX = 128
# The document list's orders (document_list's `sort`), as the page names them.
SORT_LABELS = {"updated": "Updated", "id": "Id", "size": "Size"}


@require_GET
@login_required
def home(request: HttpRequest) -> HttpResponseBase:
    memberships = memberships_for_user(user=request.user)
    if len(memberships) == 1:
        return redirect("web:inventory", memberships[0].project.id, DEFAULT_ENVIRONMENT)
    return page_render(request, "memoryadmin/home.html", None, {"projects": memberships})


@require_GET
@login_required
def switch(request: HttpRequest) -> HttpResponseBase:
    """The project switcher's target: a plain GET form, so it works without JavaScript."""
    project_id = request.GET.get("project", "")
    environment = request.GET.get("environment", DEFAULT_ENVIRONMENT)
    if environment not in Environment.values:
        environment = DEFAULT_ENVIRONMENT
    try:
        membership = membership_get(user=request.user, project_id=project_id)
    except DomainError as exc:
        return error_page(request, exc)
    return redirect("web:inventory", membership.project.id, environment)


@require_GET
@login_required
def project_home(request: HttpRequest, p: str) -> HttpResponseBase:
    try:
        membership = membership_get(user=request.user, project_id=p)
    except DomainError as exc:
        return error_page(request, exc)
    return redirect("web:inventory", membership.project.id, DEFAULT_ENVIRONMENT)


@require_GET
@project_view(READ)
def inventory(request: HttpRequest, page: Page) -> HttpResponseBase:
    resources = [
        {**row, "documents": inventory_count(row)}
        for row in resource_inventory(project=page.project, environment=page.environment)
    ]
    return page_render(request, "memoryadmin/inventory.html", page, {"resources": resources})


@require_GET
@project_view(READ, agents=True)
def documents(request: HttpRequest, page: Page, r: str) -> HttpResponseBase:
    # Any kind: a provider resource has its own page (connection, tools, where records are).
    resource = page.resource(r, documents=False)
    if not resource.keeps_documents:
        return provider_resource(request, page, resource)
    query = list_query(request.GET)
    cursor = request.GET.get("cursor") or None
    sort = request.GET.get("sort") or "updated"
    facets, facets_error = NO_FACETS, ""
    try:
        facets = document_facets(request.GET)
    except InvalidRequest as exc:
        if cursor:
            raise
        facets_error = exc.message
    rows: list[dict[str, Any]] = []
    next_cursor = None
    if not facets_error:
        rows, next_cursor = document_list(
            resource=resource, cursor=cursor, query=query, sort=sort, facets=facets
        )
    list_url = cached_reverse("web:documents", page.project.id, page.environment, r)
    swap = is_partial(request)
    filters = list_filters(query, facets)
    context = {
        # A document's page is this list's URL plus documents/<id>/: reversed once, not per row.
        "document_url": list_url + "documents/",
        "resource": resource,
        "rows": rows,
        "next_cursor": next_cursor,
        "query": query,
        "cursor": cursor,
        "sort": sort,
        "sorts": SORT_LABELS,
        "facets": facets,
        "facets_error": facets_error,
        # The query string of the filter and facets ("q=…&writer=…"), for the links and
        # forms that keep them (sort, load more, select all matching).
        "filters": filters,
        "agents": [] if swap else page.project_agents(),
        # The total shows outside the rows, on full pages only (not htmx swaps of
        # rows), and loads after the page (its COUNT grows with the resource) with the
        # filter form's fields, again whenever they change.
        "total_url": None if swap or facets_error else list_url + "total/",
    }
    # htmx: the filter swaps the table body, "load more" swaps itself for the next rows.
    partial = "more" if cursor else "results"
    response = page_render(request, "memoryadmin/documents.html", page, context, partial=partial)
    if partial == "results" and swap:
        # The filter pushes the list's URL: only the fields in use, as the links spell it
        # (the form sends every field, the empty ones too).
        kept = "&".join(part for part in (_sort_param(sort), filters) if part)
        push_url(response, list_url + (f"?{kept}" if kept else ""))
    return response


def _sort_param(sort: str) -> str:
    return "" if sort == "updated" else urlencode({"sort": sort})


def list_query(params: QueryDict) -> str:
    """The document list's id/title filter as the page reads it."""
    return params.get("q", "").strip()[:QUERY_MAX]


def list_filters(query: str, facets: DocumentFacets) -> str:
    """The filter and facets as a query string ("q=…&writer=…"; "" for none)."""
    return urlencode({"q": query, **facets.params()} if query else facets.params())


@require_GET
@project_view(READ)
def documents_total(request: HttpRequest, page: Page, r: str) -> HttpResponseBase:
    """How many live documents the resource holds, and how many of them its filter keeps:
    the list's count, loaded after it and again as the filter changes."""
    resource = page.resource(r)
    facets = document_facets(request.GET)
    query = list_query(request.GET)
    narrowed = bool(query) or facets.narrowed
    matching = document_count(resource=resource, query=query, facets=facets)
    context = {
        # Narrowed: "39 of 61 documents", the resource's total beside what matches.
        "total": document_count(resource=resource) if narrowed else matching,
        "matching": matching,
        "narrowed": narrowed,
    }
    return page_render(request, "memoryadmin/documents.html", page, context, partial="total")


def _tombstone_page(
    request: HttpRequest, page: Page, resource: Resource, exc: DocumentDeleted
) -> HttpResponseBase:
    context = {"resource": resource, "tombstone": exc.tombstone}
    return page_render(request, "memoryadmin/tombstone.html", page, context, status=exc.status)


@require_GET
@project_view(READ)
def document_detail(request: HttpRequest, page: Page, r: str, d: str) -> HttpResponseBase:
    resource = page.resource(r)
    try:
        document = document_get_or_tombstone(resource=resource, doc_id=d)
    except DocumentDeleted as exc:
        return _tombstone_page(request, page, resource, exc)
    cursor = request.GET.get("versions") or None
    versions, next_cursor = version_list(document=document, cursor=cursor)
    context = {
        "resource": resource,
        "document": document,
        "agent_writes": agent_writes_shown(
            agent_writes=document.agent_writes,
            agent_review=document.agent_review,
            default=resource.review_default,
        ),
        "versions": history_rows(versions),
        # Writes made with an API key name it: its name by prefix (one query).
        "key_names": api_key_names(
            project_id=page.project.id,
            prefixes=[
                str(v.origin.get("actor", ""))[4:]
                for v in versions
                if isinstance(v.origin, dict) and str(v.origin.get("actor", "")).startswith("key:")
            ],
        ),
        "next_versions": next_cursor,
        "versions_cursor": cursor,
    }
    return page_render(
        request,
        "memoryadmin/document.html",
        page,
        context,
        partial="more-versions" if cursor else None,
    )


@require_GET
@project_view(READ)
def version_detail(
    request: HttpRequest, page: Page, r: str, d: str, revision: str
) -> HttpResponseBase:
    resource = page.resource(r)
    document = document_get(resource=resource, doc_id=d)
    version = version_get(document=document, revision=revision)
    context = {
        "resource": resource,
        "document": document,
        "version": version,
        "row": history_rows([version])[0],
        "readers": version_readers(document=document, revision=version.revision),
        "diff": text_diff(version.text, document.text),
        "is_current": version.revision == document.revision,
    }
    return page_render(request, "memoryadmin/version.html", page, context, partial="diff")


@require_GET
@project_view(READ)
def audit(request: HttpRequest, page: Page) -> HttpResponseBase:
    form = AuditFilterForm(request.GET)
    where = form.where()
    cursor = request.GET.get("cursor") or None
    try:
        entries, next_cursor = audit_list(
            project=page.project, environment=page.environment, where=where, cursor=cursor
        )
    except InvalidRequest as exc:
        if cursor:
            raise
        form.add_error(None, exc.message)
        entries, next_cursor = [], None
    context = {
        "form": form,
        "where": where,
        "query": form.query(),
        "entries": entries,
        "next_cursor": next_cursor,
        "cursor": cursor,
        "resource_ids": resource_ids(project=page.project, environment=page.environment),
        "actions": audit_actions(project=page.project),
    }
    return page_render(
        request, "memoryadmin/audit.html", page, context, partial="more" if cursor else None
    )


def audit_rows(entries: QuerySet[Any]) -> Iterator[dict[str, Any]]:
    """The entries as a download reads them: fetched 500 at a time, within the download's
    deadline (core/dbtimeout.py, `long_read`)."""
    with long_read(float(settings.MEMORYADMIN_EXPORT_SECONDS)):
        for entry in entries.iterator(chunk_size=500):
            yield audit_record_dict(entry)


@require_GET
@project_view(READ)
def audit_download(request: HttpRequest, page: Page) -> HttpResponseBase:
    """The filtered log as CSV or JSON Lines, streamed newest first."""
    kind = request.GET.get("format", "csv")
    if kind not in DOWNLOADS:
        raise InvalidRequest("format must be csv or jsonl.")
    entries = audit_entries(
        project=page.project,
        environment=page.environment,
        where=AuditFilterForm(request.GET).where(),
    )
    rows = audit_rows(entries)
    content_type, write = DOWNLOADS[kind]
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    name = f"audit-{page.project.id}-{page.environment}-{stamp}.{kind}"
    # One at a time for the project, as its exports (memory/exportzip.py).
    busy = TransferBusy("downloading its audit log", "download", "audit_download_in_progress")
    slot = download_slot("audit-download", page.project.id, busy)
    what = f"audit log download of {page.project.id}"
    return download_response(slot, write(rows), content_type, name, what)


def as_of_context(request: HttpRequest, resource: Resource, raw: str) -> dict[str, Any]:
    """What the as-of page shows: the resource at the moment `raw` names."""
    as_of = parse_as_of(raw)
    entries, next_cursor = document_list_as_of(
        resource=resource, as_of=as_of, cursor=request.GET.get("cursor") or None
    )
    return {
        "resource": resource,
        "as_of": as_of,
        "as_of_value": raw,
        "entries": entries,
        "next_cursor": next_cursor,
    }


@require_GET
@project_view(READ)
def documents_as_of(request: HttpRequest, page: Page, r: str) -> HttpResponseBase:
    """The resource as it was at a moment, each document with its version then."""
    context = as_of_context(request, page.resource(r), request.GET.get("asOf", ""))
    return page_render(request, "memoryadmin/asof.html", page, context)
