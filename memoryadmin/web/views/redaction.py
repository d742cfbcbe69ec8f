"""Redacting an old version: a confirmation page, then the redaction service."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods

from memoryadmin.core.errors import Conflict
from memoryadmin.memory.services.documents import document_get, version_get
from memoryadmin.memory.services.redaction import version_redact
from memoryadmin.web.forms import RedactForm
from memoryadmin.web.services.roles import DELETE
from memoryadmin.web.views.base import Page, actor, page_render, project_view


@require_http_methods(["GET", "POST"])
@project_view(DELETE)
def redact(request: HttpRequest, page: Page, r: str, d: str, revision: str) -> HttpResponseBase:
    resource = page.resource(r)
    document = document_get(resource=resource, doc_id=d)
    version = version_get(document=document, revision=revision)
    form = RedactForm(request.POST if request.method == "POST" else None)
    status = 200
    if request.method == "POST":
        status = 422
        if form.is_valid():
            try:
                version_redact(
                    resource=resource,
                    doc_id=d,
                    revision=revision,
                    reason=form.cleaned_data["reason"],
                    actor=actor(request),
                )
            except Conflict as exc:
                form.add_error(None, exc.message)
                status = 409
            else:
                messages.success(request, f"Redacted version {revision} of {d}.")
                return redirect("web:version", page.project.id, page.environment, r, d, revision)
    context = {"resource": resource, "document": document, "version": version, "form": form}
    return page_render(request, "memoryadmin/redact.html", page, context, status=status)
