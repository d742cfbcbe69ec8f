"""The import page (owners): upload an export zip, see what importing it would do (a dry
run of the API's import), then confirm. Every rule is the API import's
(memoryadmin.memory.services.transfer.import_zip); the page only keeps the zip between
the two steps (memoryadmin.web.services.imports)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.middleware.csrf import CsrfViewMiddleware
from django.shortcuts import redirect
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from memoryadmin.core.errors import InvalidRequest
from memoryadmin.memory.imports import upload_max
from memoryadmin.memory.services.transfer import ImportReport, import_zip
from memoryadmin.web.services.imports import pending_keep, pending_path, upload_handlers
from memoryadmin.web.services.roles import EDIT
from memoryadmin.web.views.base import Page, actor, page_render, project_view

# What the report calls a skipped document, by its reason.
CONFLICTS = frozenset({"exists", "deleted"})


def _checked(request: HttpRequest) -> HttpResponse:
    """What the CSRF check is run for: a view that is not exempt."""
    return HttpResponse()


def _csrf_refusal(request: HttpRequest) -> HttpResponseBase | None:
    """The CSRF check, run by the view: only after the bounded upload handlers are in
    place may the body be read (the middleware would read it first, unbounded)."""
    return CsrfViewMiddleware(_checked).process_view(request, _checked, (), {})


def _summary(report: ImportReport) -> dict[str, Any]:
    rows = report.documents
    conflicts = [d for d in rows if d["status"] == "skipped" and d["reason"] in CONFLICTS]
    skipped = [d for d in rows if d["status"] == "skipped" and d["reason"] not in CONFLICTS]
    return {
        "created": [d for d in rows if d["status"] == "created"],
        "conflicts": conflicts,
        "skipped": skipped,
        "failed": [d for d in rows if d["status"] == "failed"],
    }


def _run(request: HttpRequest, page: Page, token: str, *, dry_run: bool) -> ImportReport:
    path = pending_path(project_id=page.project.id, environment=page.environment, token=token)
    with path.open("rb") as upload:
        report = import_zip(
            project=page.project,
            environment=page.environment,
            upload=upload,
            actor=actor(request),
            dry_run=dry_run,
        )
    if not dry_run:
        path.unlink(missing_ok=True)
    return report


@csrf_exempt
@require_http_methods(["GET", "POST"])
@project_view(EDIT)
def memory_import(request: HttpRequest, page: Page) -> HttpResponseBase:
    context: dict[str, Any] = {"upload_max": upload_max()}
    if request.method == "GET":
        return page_render(request, "memoryadmin/import.html", page, context)
    request.upload_handlers = upload_handlers(request)
    refusal = _csrf_refusal(request)
    if refusal is not None:
        return refusal
    token = request.POST.get("upload", "")
    if request.POST.get("confirm") == "yes":
        summary = _summary(_run(request, page, token, dry_run=False))
        messages.success(
            request,
            f"Imported: {len(summary['created'])} created, {len(summary['conflicts'])} "
            f"conflicts and {len(summary['skipped'])} others skipped, "
            f"{len(summary['failed'])} failed.",
        )
        # After the POST a redirect: reloading shows the page, it imports nothing again.
        return redirect("web:inventory", page.project.id, page.environment)
    upload = request.FILES.get("export")
    if upload is None:
        raise InvalidRequest("Choose an export zip to upload.")
    with pending_keep(
        project_id=page.project.id, environment=page.environment, upload=upload
    ) as token:
        upload.close()
        report = _run(request, page, token, dry_run=True)
    context.update(report=report, summary=_summary(report), token=token, name=upload.name)
    return page_render(request, "memoryadmin/import.html", page, context)
