"""Pages that change memory: create, edit (with conflicts), freeze, delete, restore.

Each is a plain form that posts, then redirects; the role check happens in
`project_view` before the view runs, whatever the page showed.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods, require_POST

from memoryadmin.core.diff import text_diff
from memoryadmin.core.errors import DomainError, InvalidRequest, PreconditionFailed
from memoryadmin.memory.models import Document, Resource
from memoryadmin.memory.services.asof import resource_restore_as_of
from memoryadmin.memory.services.documents import (
    document_create,
    document_delete,
    document_get,
    document_restore,
    document_set_agent_writes,
    document_set_write_mode,
)
from memoryadmin.memory.services.edits import document_edit, edit_reapply
from memoryadmin.web.forms import DeleteForm, DocumentCreateForm, DocumentEditForm, RevisionForm
from memoryadmin.web.services.roles import DELETE, EDIT, FREEZE
from memoryadmin.web.views.base import INVALID, Page, actor, page_render, project_view
from memoryadmin.web.views.reading import as_of_context

CONFLICT = 409


def _to_document(page: Page, resource: Resource, doc_id: str) -> HttpResponseBase:
    return redirect("web:document", page.project.id, page.environment, resource.resource_id, doc_id)


@require_http_methods(["GET", "POST"])
@project_view(EDIT)
def create(request: HttpRequest, page: Page, r: str) -> HttpResponseBase:
    resource = page.resource(r)
    form = DocumentCreateForm(request.POST if request.method == "POST" else None, resource=resource)
    status = 200
    if request.method == "POST":
        status = INVALID
        if form.is_valid():
            data = form.cleaned_data
            try:
                document = document_create(
                    resource=resource,
                    doc_id=data["doc_id"],
                    title=data["title"],
                    text=data["text"],
                    summary=data["summary"],
                    agent_writes=not data["frozen"],
                    actor=actor(request),
                )
            except DomainError as exc:
                form.add_domain_error(exc, default_field="doc_id")
            else:
                messages.success(request, f"Created {document.doc_id}.")
                return _to_document(page, resource, document.doc_id)
    context = {"resource": resource, "form": form}
    return page_render(request, "memoryadmin/create.html", page, context, status=status)


@require_http_methods(["GET", "POST"])
@project_view(EDIT)
def edit(request: HttpRequest, page: Page, r: str, d: str) -> HttpResponseBase:
    resource = page.resource(r)
    document = document_get(resource=resource, doc_id=d)
    if request.method == "GET":
        initial = {
            "revision": document.revision,
            "title": document.title,
            "summary": document.summary,
            "text": document.text,
        }
        form = DocumentEditForm(initial=initial, max_bytes=resource.max_bytes)
        return _edit_page(request, page, resource, document, form)
    form = DocumentEditForm(request.POST, max_bytes=resource.max_bytes)
    if not form.is_valid():
        return _edit_page(request, page, resource, document, form, status=INVALID)
    data = form.cleaned_data
    try:
        saved = document_edit(
            resource=resource,
            doc_id=document.doc_id,
            expected_revision=data["revision"],
            title=data["title"],
            text=data["text"],
            summary=data["summary"],
            actor=actor(request),
        )
    except PreconditionFailed:
        return _conflict(request, page, resource, document.doc_id, form)
    except DomainError as exc:
        form.add_domain_error(exc)
        return _edit_page(request, page, resource, document, form, status=INVALID)
    if saved is None:
        messages.info(request, "Nothing changed, so nothing was saved.")
    else:
        messages.success(request, f"Saved {document.doc_id} (revision {saved.revision[:8]}).")
    return _to_document(page, resource, document.doc_id)


def _edit_page(
    request: HttpRequest,
    page: Page,
    resource: Resource,
    document: Document,
    form: DocumentEditForm,
    *,
    status: int = 200,
) -> HttpResponseBase:
    context = {"resource": resource, "document": document, "form": form}
    return page_render(request, "memoryadmin/edit.html", page, context, status=status)


def _conflict(
    request: HttpRequest, page: Page, resource: Resource, doc_id: str, form: DocumentEditForm
) -> HttpResponseBase:
    """Someone saved meanwhile: show both texts and offer to reapply the edit on top."""
    mine = form.cleaned_data
    # Raises NotFound (an error page) when the document was deleted meanwhile.
    current = document_get(resource=resource, doc_id=doc_id)
    reapply = edit_reapply(
        current=current,
        base_revision=mine["revision"],
        title=mine["title"],
        text=mine["text"],
        summary=mine["summary"],
    )
    base = current.text if reapply.base_text is None else reapply.base_text
    retry = DocumentEditForm(
        initial={
            "revision": current.revision,
            "title": reapply.title,
            "summary": reapply.summary,
            "text": reapply.text,
        },
        max_bytes=resource.max_bytes,
    )
    context = {
        "resource": resource,
        "document": current,
        "form": retry,
        "conflict": {
            "mine": mine,
            "reapply": reapply,
            # Each change against the text both started from, so that neither side's
            # lines read as "removed" when the merge keeps them.
            "theirs_diff": text_diff(base, current.text),
            "mine_diff": text_diff(base, mine["text"]),
            "known_base": reapply.base_text is not None,
            "title_differs": mine["title"] != current.title,
            "summary_differs": mine["summary"] != current.summary,
        },
    }
    return page_render(request, "memoryadmin/edit.html", page, context, status=CONFLICT)


def _revision_conflict(request: HttpRequest, document: Document) -> None:
    messages.warning(
        request,
        f"{document.doc_id} changed while you were looking at it (now revision "
        f"{document.revision[:8]}). Check it and confirm again.",
    )


def _confirm_page(
    request: HttpRequest,
    page: Page,
    resource: Resource,
    document: Document,
    action: str,
    form: RevisionForm | None,
    *,
    status: int = 200,
) -> HttpResponseBase:
    context = {"resource": resource, "document": document, "action": action, "form": form}
    return page_render(
        request, "memoryadmin/confirm.html", page, context, partial="dialog", status=status
    )


def _set_agent_writes(
    request: HttpRequest, page: Page, r: str, d: str, *, enabled: bool
) -> HttpResponseBase:
    action = "unfreeze" if enabled else "freeze"
    resource = page.resource(r)
    document = document_get(resource=resource, doc_id=d)
    if request.method == "GET":
        return _confirm_page(request, page, resource, document, action, None)
    # No revision: a freeze must not fail because someone edited the text meanwhile.
    document, changed = document_set_agent_writes(
        resource=resource, doc_id=document.doc_id, enabled=enabled, actor=actor(request)
    )
    if not changed:
        state = "enabled" if enabled else "frozen"
        messages.info(request, f"Agent writes to {document.doc_id} were already {state}.")
    elif enabled:
        messages.success(request, f"Unfrozen: agents may save to {document.doc_id} again.")
    else:
        messages.success(
            request, f"Frozen: agent saves to {document.doc_id} are refused until unfrozen."
        )
    return _to_document(page, resource, document.doc_id)


@require_http_methods(["GET", "POST"])
@project_view(FREEZE)
def freeze(request: HttpRequest, page: Page, r: str, d: str) -> HttpResponseBase:
    return _set_agent_writes(request, page, r, d, enabled=False)


@require_http_methods(["GET", "POST"])
@project_view(FREEZE)
def unfreeze(request: HttpRequest, page: Page, r: str, d: str) -> HttpResponseBase:
    return _set_agent_writes(request, page, r, d, enabled=True)


WRITE_MODE_DONE = {
    "enabled": "Agents write: saves to {} commit at once.",
    "review": "Agents propose: saves to {} wait for an owner's review.",
}


@require_POST
@project_view(FREEZE)
def write_mode(request: HttpRequest, page: Page, r: str, d: str) -> HttpResponseBase:
    """The document's one agent-writes control: agents write, propose, or cannot
    write. Choosing the last asks first, as the freeze always has."""
    resource = page.resource(r)
    document = document_get(resource=resource, doc_id=d)
    mode = request.POST.get("agentWrites")
    if mode == "disabled":
        return redirect(
            "web:document-freeze", page.project.id, page.environment, r, document.doc_id
        )
    try:
        document, changed = document_set_write_mode(
            resource=resource, doc_id=document.doc_id, mode=str(mode), actor=actor(request)
        )
    except InvalidRequest:
        messages.error(request, "Choose whether agents write, propose or cannot write.")
        return _to_document(page, resource, document.doc_id)
    if changed:
        messages.success(request, WRITE_MODE_DONE[str(mode)].format(document.doc_id))
    else:
        messages.info(request, f"{document.doc_id} already was in that mode.")
    return _to_document(page, resource, document.doc_id)


@require_http_methods(["GET", "POST"])
@project_view(DELETE)
def delete(request: HttpRequest, page: Page, r: str, d: str) -> HttpResponseBase:
    resource = page.resource(r)
    document = document_get(resource=resource, doc_id=d)
    if request.method == "GET":
        form = DeleteForm(initial={"revision": document.revision}, doc_id=document.doc_id)
        return _confirm_page(request, page, resource, document, "delete", form)
    form = DeleteForm(request.POST, doc_id=document.doc_id)
    if not form.is_valid():
        return _confirm_page(request, page, resource, document, "delete", form, status=INVALID)
    try:
        document_delete(
            resource=resource,
            doc_id=document.doc_id,
            expected_revision=form.cleaned_data["revision"],
            actor=actor(request),
        )
    except PreconditionFailed:
        _revision_conflict(request, document)
        fresh = DeleteForm(initial={"revision": document.revision}, doc_id=document.doc_id)
        return _confirm_page(request, page, resource, document, "delete", fresh, status=CONFLICT)
    messages.success(
        request,
        f"Deleted {document.doc_id}. Its id stays reserved: no new document can use it.",
    )
    return redirect("web:documents", page.project.id, page.environment, resource.resource_id)


@require_POST
@project_view(EDIT)
def restore(request: HttpRequest, page: Page, r: str, d: str, revision: str) -> HttpResponseBase:
    resource = page.resource(r)
    document = document_get(resource=resource, doc_id=d)
    form = RevisionForm(request.POST)
    try:
        if not form.is_valid():
            raise PreconditionFailed("The form did not say which revision it restores over.")
        restored = document_restore(
            resource=resource,
            doc_id=document.doc_id,
            revision=revision,
            expected_revision=form.cleaned_data["revision"],
            actor=actor(request),
        )
    except PreconditionFailed:
        _revision_conflict(request, document)
        return redirect(
            "web:version", page.project.id, page.environment, r, document.doc_id, revision
        )
    messages.success(
        request,
        f"Restored version {revision[:8]} of {document.doc_id} as revision "
        f"{restored.revision[:8]}.",
    )
    return _to_document(page, resource, document.doc_id)


@require_http_methods(["GET", "POST"])
@project_view(EDIT, repeatable_query=frozenset({"documents"}))
def restore_as_of(request: HttpRequest, page: Page, r: str) -> HttpResponseBase:
    """GET: the plan (a dry run) for the chosen documents or the whole resource. POST: apply
    what the plan showed: the whole resource only when it says so (`scope=all`), never
    for want of a choice."""
    resource = page.resource(r)
    data = request.POST if request.method == "POST" else request.GET
    context = as_of_context(request, resource, data.get("asOf", ""))
    chosen = data.getlist("documents")
    whole = data.get("scope") == "all"
    if request.method == "POST" and not whole and not chosen:
        raise InvalidRequest("Choose the documents to restore, or plan the whole resource.")
    doc_ids = None if whole else chosen
    status = 200
    try:
        # A POST restores the plan its form was shown (`seen`), or nothing.
        context["plan"] = resource_restore_as_of(
            resource=resource,
            as_of=context["as_of"],
            doc_ids=doc_ids,
            dry_run=request.method == "GET",
            actor=actor(request),
            seen=data.get("seen", "") if request.method == "POST" else None,
        )
    except PreconditionFailed:
        messages.warning(
            request,
            "The documents changed since you saw this plan: nothing was restored. "
            "Check the plan as it is now and restore again.",
        )
        context["plan"] = resource_restore_as_of(
            resource=resource, as_of=context["as_of"], doc_ids=doc_ids, dry_run=True, actor=""
        )
        status = CONFLICT
    context["chosen"] = [] if whole else chosen
    context["whole"] = whole
    return page_render(request, "memoryadmin/asof.html", page, context, status=status)
