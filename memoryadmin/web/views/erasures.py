"""Erasures on the Memory page: preview what an erasure removes, erase for good (owners),
read past erasures and download their signed receipts."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_http_methods

from memoryadmin.core.errors import DomainError
from memoryadmin.erasures import services
from memoryadmin.web.forms import ErasureConfirmForm, ErasureForm
from memoryadmin.web.services.roles import ERASE, ERASE_PREVIEW, READ
from memoryadmin.web.views.base import Page, actor, page_render, project_view


def _erasure_asks(request: HttpRequest) -> str | None:
    """Reading the page is everyone's; sending the form previews, or erases for good."""
    if request.method != "POST":
        return None
    return ERASE if "erase" in request.POST else ERASE_PREVIEW


@require_http_methods(["GET", "POST"])
@project_view(READ, asks=_erasure_asks)
def erasures(request: HttpRequest, page: Page) -> HttpResponseBase:
    """The form (a preview first, then the confirmation) and the list of past erasures."""
    status, preview = 200, None
    confirm: ErasureForm | None = None
    form = ErasureForm()
    if request.method == "POST":
        erase = "erase" in request.POST
        form = (ErasureConfirmForm if erase else ErasureForm)(request.POST)
        status = 422
        if form.is_valid():
            common = {
                "project": page.project,
                "environment": page.environment,
                "reason": form.cleaned_data["reason"],
                "actor": actor(request),
            }
            try:
                outcome = services.erasure_run(match=form.match(), dry_run=not erase, **common)
            except DomainError as exc:
                form.add_error(None, exc.message)
                status = exc.status if exc.status != 400 else 422
            else:
                if outcome.erasure is not None:
                    return redirect(
                        "web:erasure", page.project.id, page.environment, outcome.erasure.id
                    )
                status, preview = 200, outcome
                confirm = ErasureConfirmForm(initial=form.cleaned_data) if page.can_erase else None
        elif erase:
            # A missing confirmation: the preview stays on screen with the error.
            confirm, form = form, ErasureForm(request.POST)
            if form.is_valid():
                preview = services.erasure_run(
                    match=form.match(),
                    dry_run=True,
                    project=page.project,
                    environment=page.environment,
                    reason=form.cleaned_data["reason"],
                    actor=actor(request),
                )
    rows, _ = services.erasure_list(project=page.project, environment=page.environment)
    context = {
        "form": form,
        "preview": preview,
        "places": [
            (name, label, preview.places.get(name, 0)) for name, label in services.PLACES.items()
        ]
        if preview is not None
        else [],
        "confirm": confirm,
        "erasures": [services.erasure_dict(row) for row in rows],
    }
    return page_render(request, "memoryadmin/erasures.html", page, context, status=status)


@require_GET
@project_view(READ)
def erasure(request: HttpRequest, page: Page, erasure_id: str) -> HttpResponseBase:
    found = services.erasure_get(
        project=page.project, environment=page.environment, erasure_id=erasure_id
    )
    body = services.erasure_dict(found)
    context = {
        "erasure": body,
        "places": [
            (name, label, body["places"].get(name, 0)) for name, label in services.PLACES.items()
        ],
        "external": body["receipt"]["receipt"]["external"],
        "receipt_json": json.dumps(body["receipt"], indent=2, ensure_ascii=False),
    }
    return page_render(request, "memoryadmin/erasure.html", page, context)


@require_GET
@project_view(READ)
def erasure_receipt(request: HttpRequest, page: Page, erasure_id: str) -> HttpResponseBase:
    found = services.erasure_get(
        project=page.project, environment=page.environment, erasure_id=erasure_id
    )
    response = HttpResponse(
        json.dumps(found.signed, indent=2, ensure_ascii=False) + "\n",
        content_type="application/json; charset=utf-8",
    )
    response["Content-Disposition"] = f'attachment; filename="erasure-{found.id}.json"'
    return response
