"""The export page: choose resources, download a zip streamed from one export snapshot."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponseBase
from django.views.decorators.http import require_http_methods

from memoryadmin.memory.exportzip import export_download
from memoryadmin.memory.providers import kinds_keeping_documents
from memoryadmin.memory.services.deployments import resource_inventory
from memoryadmin.web.forms import ExportForm
from memoryadmin.web.services.roles import EXPORT
from memoryadmin.web.views.base import Page, actor, page_render, project_view


@require_http_methods(["GET", "POST"])
@project_view(EXPORT)
def export(request: HttpRequest, page: Page) -> HttpResponseBase:
    inventory = [
        row
        for row in resource_inventory(project=page.project, environment=page.environment)
        if row["provider"]["kind"] in kinds_keeping_documents()
    ]
    choices = [row["id"] for row in inventory]
    # "Select none" and "Select all" are GET buttons of the form: no script needed.
    initial = [] if request.GET.get("select") == "none" else choices
    form = ExportForm(
        request.POST if request.method == "POST" else None, resource_ids=choices, initial=initial
    )
    if request.method == "POST" and form.is_valid():
        chosen = list(form.cleaned_data["resources"])
        # Everything chosen is the whole environment, which is how the manifest says it.
        wanted = None if set(chosen) == set(choices) else chosen
        return export_download(page.project, page.environment, wanted, actor(request))
    status = 422 if request.method == "POST" else 200
    counts = {row["id"]: row["documents"] for row in inventory}
    picked = set(request.POST.getlist("resources") if form.is_bound else initial)
    context = {
        "form": form,
        "resource_ids": choices,
        "rows": [(checkbox, counts[checkbox.data["value"]]) for checkbox in form["resources"]],
        "chosen_resources": len(picked & set(choices)),
        "chosen_documents": sum(counts[r] for r in picked if r in counts),
    }
    return page_render(request, "memoryadmin/export.html", page, context, status=status)
