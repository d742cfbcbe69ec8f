"""Bulk actions on the documents of a resource: one confirmation naming the count, then
each document through its own service call; the result names the ones that failed."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from memoryadmin.core.errors import InvalidRequest
from memoryadmin.memory.exportzip import export_download
from memoryadmin.web.services.bulk import (
    BULK_ACTIONS,
    BULK_READS,
    BulkResult,
    bulk_selection,
    documents_bulk,
)
from memoryadmin.web.services.roles import DELETE, EXPORT, FREEZE, membership_require
from memoryadmin.web.views.base import Page, actor, page_render, project_view

PAST = {"freeze": "Froze", "unfreeze": "Unfroze", "delete": "Deleted"}


def _plural(count: int) -> str:
    return f"{count} document{'s' if count != 1 else ''}"


def _report(request: HttpRequest, action: str, result: BulkResult) -> None:
    if result.done:
        messages.success(request, f"{PAST[action]} {_plural(len(result.done))}.")
    if result.unchanged:
        state = "frozen" if action == "freeze" else "unfrozen"
        messages.info(request, f"Already {state}, unchanged: {', '.join(result.unchanged)}.")
    if result.failed:
        reasons = "; ".join(f"{doc_id}: {why}" for doc_id, why in result.failed)
        messages.error(
            request,
            f"Not done for {_plural(len(result.failed))} ({reasons}). "
            "Nothing else changed for them.",
        )


@require_POST
@project_view(FREEZE)
def documents_bulk_view(request: HttpRequest, page: Page, r: str) -> HttpResponseBase:
    resource = page.resource(r)
    action = request.POST.get("action", "")
    if action not in BULK_ACTIONS:
        raise InvalidRequest(f"Choose an action: {', '.join(BULK_ACTIONS)}.")
    permission = {"delete": DELETE, "export": EXPORT}.get(action, FREEZE)
    membership_require(membership=page.membership, permission=permission)
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
    if request.POST.get("confirm") != "yes":
        context = {"resource": resource, "action": action, "selected": selected}
        return page_render(request, "memoryadmin/bulk_confirm.html", page, context)
    result = documents_bulk(
        resource=resource, action=action, selected=selected, actor=actor(request)
    )
    _report(request, action, result)
    return redirect("web:documents", page.project.id, page.environment, resource.resource_id)
