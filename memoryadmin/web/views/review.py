"""The review inbox: agent proposals with their diffs; approve, edit then approve, reject.

Approving writes text, so it needs the edit permission; support may see the
inbox and reject. A document that moved since the page was shown turns an
approval into the merge view, as an owner's edit conflict does.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from memoryadmin.core.errors import DomainError, PreconditionFailed
from memoryadmin.memory.models import ProposalState
from memoryadmin.memory.services.proposals import (
    proposal_approve,
    proposal_get,
    proposal_list,
    proposal_merge,
    proposal_pending_count,
    proposal_reject,
)
from memoryadmin.web.forms import ProposalApproveForm, ProposalRejectForm
from memoryadmin.web.services.review import proposal_views
from memoryadmin.web.services.roles import EDIT, REVIEW
from memoryadmin.web.views.base import INVALID, Page, actor, page_render, project_view

CONFLICT = 409


@require_GET
@project_view(REVIEW)
def inbox(request: HttpRequest, page: Page) -> HttpResponseBase:
    state = request.GET.get("state") or ProposalState.PENDING
    if state not in ProposalState.values:
        state = ProposalState.PENDING
    cursor = request.GET.get("cursor") or None
    rows, next_cursor = proposal_list(
        project=page.project, environment=page.environment, state=state, cursor=cursor
    )
    context = {
        "views": proposal_views(rows),
        "state": state,
        "states": ProposalState.values,
        "next_cursor": next_cursor,
    }
    return page_render(request, "memoryadmin/review.html", page, context)


@require_GET
@project_view(REVIEW)
def inbox_count(request: HttpRequest, page: Page) -> HttpResponseBase:
    """The header badge, loaded after the page so that no page pays for the count."""
    count = proposal_pending_count(project=page.project, environment=page.environment)
    return page_render(request, "memoryadmin/review.html", page, {"count": count}, partial="badge")


def _proposal_page(
    request: HttpRequest,
    page: Page,
    proposal_id: str,
    *,
    form: ProposalApproveForm | None = None,
    conflict: bool = False,
    status: int = 200,
) -> HttpResponseBase:
    proposal = proposal_get(
        project=page.project, environment=page.environment, proposal_id=proposal_id
    )
    view = proposal_views([proposal])[0]
    merged = None
    if form is None or conflict:
        merged = proposal_merge(proposal=proposal, current=proposal.document)
        text = merged if merged is not None else proposal.text
        summary = proposal.summary if proposal.summary is not None else proposal.document.summary
        form = ProposalApproveForm(
            initial={"revision": proposal.document.revision, "text": text, "summary": summary},
            max_bytes=proposal.document.resource.max_bytes,
        )
    context = {
        "view": view,
        "document": proposal.document,
        "resource": proposal.document.resource,
        "form": form,
        "reject_form": ProposalRejectForm(),
        "conflict": conflict,
        "merged": merged is not None and view.moved,
    }
    return page_render(request, "memoryadmin/proposal.html", page, context, status=status)


@require_GET
@project_view(REVIEW)
def proposal_detail(request: HttpRequest, page: Page, proposal: str) -> HttpResponseBase:
    return _proposal_page(request, page, proposal)


@require_POST
@project_view(EDIT)
def approve(request: HttpRequest, page: Page, proposal: str) -> HttpResponseBase:
    found = proposal_get(project=page.project, environment=page.environment, proposal_id=proposal)
    form = ProposalApproveForm(request.POST, max_bytes=found.document.resource.max_bytes)
    if not form.is_valid():
        return _proposal_page(request, page, proposal, form=form, status=INVALID)
    data = form.cleaned_data
    # The inbox's one-click approval sends no text: the proposal as it is.
    edited = "text" in request.POST
    try:
        document = proposal_approve(
            project=page.project,
            environment=page.environment,
            proposal_id=proposal,
            expected_revision=data["revision"],
            text=data["text"] if edited else None,
            summary=data["summary"] if edited else None,
            actor=actor(request),
        )
    except PreconditionFailed:
        messages.warning(
            request,
            f"{found.document.doc_id} changed after this page was shown: nothing was written. "
            "Check the merge below and approve again.",
        )
        return _proposal_page(request, page, proposal, conflict=True, status=CONFLICT)
    except DomainError as exc:
        if exc.status != 400 and exc.status != 413:
            raise
        form.add_error("text", exc.message)
        return _proposal_page(request, page, proposal, form=form, status=INVALID)
    messages.success(request, f"Approved: {document.doc_id} is at revision {document.revision}.")
    return redirect("web:review", page.project.id, page.environment)


@require_http_methods(["POST"])
@project_view(REVIEW)
def reject(request: HttpRequest, page: Page, proposal: str) -> HttpResponseBase:
    form = ProposalRejectForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Say why the proposal is rejected.")
        return redirect("web:proposal", page.project.id, page.environment, proposal)
    proposal_reject(
        project=page.project,
        environment=page.environment,
        proposal_id=proposal,
        reason=form.cleaned_data["reason"],
        actor=actor(request),
    )
    messages.success(request, f"Rejected {proposal}.")
    return redirect("web:review", page.project.id, page.environment)
