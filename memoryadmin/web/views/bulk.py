"""Bulk actions on the documents of a resource: one confirmation naming the count, then
each document through its own service call; the result names the ones that failed."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponseBase, QueryDict
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from memoryadmin.core.errors import InvalidRequest
from memoryadmin.memory.exportzip import export_download
from memoryadmin.memory.services.document_filters import NO_FACETS, document_facets
from memoryadmin.web.services.bulk import (
    BULK_ACTIONS,
    BULK_MATCHING_MAX,
    BULK_READS,
    BulkResult,
    bulk_matching,
    bulk_seen,
    bulk_selection,
    documents_bulk,
)
from memoryadmin.web.services.roles import DELETE, EXPORT, FREEZE
from memoryadmin.web.views.base import Page, actor, page_render, project_view
from memoryadmin.web.views.reading import SORT_LABELS, list_filters, list_query

# How many ids of a "select all matching" the confirmation lists (it names the count).
SHOWN_IDS = 20

PAST = {"freeze": "Froze", "unfreeze": "Unfroze", "delete": "Deleted"}


def _plural(count: int) -> str:
    return f"{count} document{'s' if count != 1 else ''}"


def _names(doc_ids: list[str]) -> str:
    shown = ", ".join(doc_ids[:SHOWN_IDS])
    more = len(doc_ids) - SHOWN_IDS
    return f"{shown} and {more} more" if more > 0 else shown


def _back_query(raw: str) -> str:
    """The list's query string the person came from (its sort, filter and facets), as
    the list spells it: read again from what was sent, keeping only the list's own
    parameters, so the way back is always this resource's list on this site."""
    params = QueryDict(raw[:2000])
    try:
        facets = document_facets(params)
    except InvalidRequest:
        facets = NO_FACETS
    sort = params.get("sort", "")
    kept = urlencode({"sort": sort}) if sort in SORT_LABELS and sort != "updated" else ""
    return "&".join(part for part in (kept, list_filters(list_query(params), facets)) if part)


def _report(request: HttpRequest, action: str, result: BulkResult) -> None:
    if result.done:
        messages.success(request, f"{PAST[action]} {_plural(len(result.done))}.")
    if result.unchanged:
        state = "frozen" if action == "freeze" else "unfrozen"
        messages.info(request, f"Already {state}, unchanged: {_names(result.unchanged)}.")
    if result.failed:
        reasons = "; ".join(f"{doc_id}: {why}" for doc_id, why in result.failed[:SHOWN_IDS])
        if len(result.failed) > SHOWN_IDS:
            reasons += f"; and {len(result.failed) - SHOWN_IDS} more (see the audit log)"
        messages.error(
            request,
            f"Not done for {_plural(len(result.failed))} ({reasons}). "
            "Nothing else changed for them.",
        )


def _bulk_asks(request: HttpRequest) -> str | None:
    """Deleting is the owners'; exporting needs the export permission (freezing, the
    view's own, is asked of every action)."""
    return {"delete": DELETE, "export": EXPORT}.get(request.POST.get("action", ""))


@require_POST
@project_view(FREEZE, asks=_bulk_asks)
def documents_bulk_view(request: HttpRequest, page: Page, r: str) -> HttpResponseBase:
    resource = page.resource(r)
    action = request.POST.get("action", "")
    if action not in BULK_ACTIONS:
        raise InvalidRequest(f"Choose an action: {', '.join(BULK_ACTIONS)}.")
    # Back to the list as it was (its sort and filter): the bulk form and its
    # confirmation carry the list's query string in `back`.
    back_query = _back_query(request.POST.get("back", ""))
    list_url = reverse(
        "web:documents", args=[page.project.id, page.environment, resource.resource_id]
    )
    back = redirect(list_url + (f"?{back_query}" if back_query else ""))
    matching = request.POST.get("all") == "matching"
    filters = ""
    if matching:
        # Every document the list's filter and facets keep, read here from the filter:
        # not a list the browser sends.
        query, facets = list_query(request.POST), document_facets(request.POST)
        selected = bulk_matching(resource=resource, query=query, facets=facets)
        filters = list_filters(query, facets)
    elif not request.POST.getlist("doc"):
        # The buttons wait for a ticked box; a form sent without one (no script) is
        # told so on the list it came from, not shown an error page.
        messages.warning(request, "Nothing was selected: tick the documents to act on first.")
        return back
    else:
        selected = bulk_selection(request.POST.getlist("doc"))
    if action in BULK_READS:
        # A download changes nothing: no confirmation; the zip holds the selected
        # documents as they are now (one deleted meanwhile is left out).
        return export_download(
            page.project,
            page.environment,
            [resource.resource_id],
            actor(request),
            doc_ids=[item.doc_id for item in selected],
        )
    confirmed = request.POST.get("confirm") == "yes"
    # A confirmation of "all matching" holds for the documents it named (and, for a
    # delete, their revisions): if documents came, went or (deleting) were written
    # meanwhile, it is asked again with the count now.
    seen = bulk_seen(action, selected) if matching else ""
    changed = matching and confirmed and request.POST.get("seen") != seen
    if not confirmed or changed:
        context = {
            "resource": resource,
            "action": action,
            "selected": selected[:SHOWN_IDS] if matching else selected,
            "count": len(selected),
            "matching": matching,
            "filters": QueryDict(filters),
            "back": back_query,
            "changed": changed,
            "seen": seen,
            "matching_max": BULK_MATCHING_MAX,
        }
        return page_render(request, "memoryadmin/bulk_confirm.html", page, context)
    result = documents_bulk(
        resource=resource, action=action, selected=selected, actor=actor(request)
    )
    _report(request, action, result)
    return back
