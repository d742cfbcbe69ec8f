"""Memory incidents on the Memory page: open one from a session, a version, a key or a text,
see what it reached hop by hop, contain it (owners; support dry-run and freeze)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from memoryadmin.core.errors import DomainError
from memoryadmin.incidents.models import Incident
from memoryadmin.incidents.services import contain as contain_services
from memoryadmin.incidents.services import incidents as incident_services
from memoryadmin.web.services.roles import CONTAIN, FREEZE, INCIDENTS, READ
from memoryadmin.web.views.base import Page, actor, page_render, project_view

SOURCE_KINDS = (
    ("session", "Session id"),
    ("version", "Version (resource/document@revision)"),
    ("apiKey", "API key prefix"),
    ("text", "Exact text"),
)
KIND_LABELS = {
    "version": "Versions",
    "recall": "Recalls",
    "session": "Sessions",
    "record": "Records",
}


def _source(kind: str, value: str) -> dict[str, Any]:
    """The page's one field as the source the service checks."""
    if kind == "version":
        path, _, revision = value.rpartition("@")
        resource, _, document = path.partition("/")
        return {"version": {"resource": resource, "document": document, "revision": revision}}
    return {kind: value}


def _default_title(kind: str, value: str) -> str:
    """The title of an incident opened without one: never an exact text itself (an erasure
    of that text would have to find it in every title)."""
    if kind == "text":
        return f"Text ({len(value)} characters)"
    return f"{kind} {value}"[:200]


def _list_render(
    request: HttpRequest, page: Page, *, cursor: str | None, form: dict[str, str], status: int
) -> HttpResponse:
    rows, next_cursor = incident_services.incident_list(
        project=page.project, environment=page.environment, cursor=cursor
    )
    context = {"incidents": rows, "next_cursor": next_cursor, "kinds": SOURCE_KINDS, "form": form}
    return page_render(request, "memoryadmin/incidents.html", page, context, status=status)


@require_GET
@project_view(READ)
def incident_list(request: HttpRequest, page: Page) -> HttpResponseBase:
    cursor = request.GET.get("cursor") or None
    form = {"kind": "text", "value": "", "title": "", "hops": "3"}
    return _list_render(request, page, cursor=cursor, form=form, status=200)


@require_POST
@project_view(INCIDENTS)
def incident_open(request: HttpRequest, page: Page) -> HttpResponseBase:
    kind, value = request.POST.get("kind", ""), request.POST.get("value", "")
    title = request.POST.get("title", "") or _default_title(kind, value)
    try:
        incident = incident_services.incident_create(
            project=page.project,
            environment=page.environment,
            title=title,
            source=_source(kind, value),
            hops=request.POST.get("hops") or None,
            actor=actor(request),
        )
    except DomainError as exc:
        # Answered here, with what was typed: a redirect would carry the source (an exact
        # text to trace, often the poison itself) in a URL, and URLs reach access logs,
        # browser history and proxies, where no erasure finds them.
        messages.error(request, exc.message)
        form = {
            "kind": kind,
            "value": value,
            "title": request.POST.get("title", ""),
            "hops": request.POST.get("hops", ""),
        }
        status = exc.status if exc.status != 400 else 422
        return _list_render(request, page, cursor=None, form=form, status=status)
    return redirect("web:incident", page.project.id, page.environment, incident.id)


def _link(page: Page, node: dict[str, Any]) -> str:
    """The page of a node: a version (or proposal), a session, a recall's session, a record."""
    p, e = page.project.id, page.environment
    kind = node["kind"]
    if kind == "version" and node.get("proposal"):
        return reverse("web:proposal", args=[p, e, node["proposal"]])
    if kind == "version":
        return reverse(
            "web:version", args=[p, e, node["resource"], node["document"], node["revision"]]
        )
    if kind == "session":
        return reverse("web:session", args=[p, e, node["id"].removeprefix("session:")])
    if kind == "recall":
        return reverse("web:session", args=[p, e, node["session"]]) + "#recalls"
    if node.get("recordId"):
        url = reverse("web:record", args=[p, e, node["resource"], node["recordId"]])
        return f"{url}?{urlencode({'namespace': node.get('namespace', '')})}"
    return ""


def _label(node: dict[str, Any]) -> str:
    kind = node["kind"]
    if kind == "version" and node.get("proposal"):
        return f"{node['resource']}/{node['document']} (proposal {node['proposal']})"
    if kind == "version":
        return f"{node['resource']}/{node['document']}@{node['revision'][:8]}"
    if kind == "record" and node.get("operation"):
        return f"{node['resource']} (write pending: {node['operation']})"
    if kind == "record":
        return f"{node['resource']}/{node.get('recordId') or node.get('callId', '')}"
    return node["id"].split(":", 1)[1]


def _context(page: Page, incident: Incident, report: dict[str, Any] | None) -> dict[str, Any]:
    data = incident_services.incident_dict(incident)
    nodes = data["graph"]["nodes"]
    into: dict[str, list[dict[str, Any]]] = {}
    for edge in data["graph"]["edges"]:
        into.setdefault(edge["to"], []).append(edge)
    shown = report or data["containment"] or {}
    outcomes = {n["id"]: n["outcomes"] for n in shown.get("nodes", [])}
    rows = [
        {
            **node,
            "label": _label(node),
            "link": _link(page, node),
            "from": into.get(node["id"], []),
            "outcomes": outcomes.get(node["id"], {}),
        }
        for node in nodes
    ]
    hops = max((node["hop"] for node in nodes), default=-1)
    columns = [
        {
            "hop": hop,
            "groups": [
                (label, [r for r in rows if r["hop"] == hop and r["kind"] == kind])
                for kind, label in KIND_LABELS.items()
                if any(r["hop"] == hop and r["kind"] == kind for r in rows)
            ],
        }
        for hop in range(hops + 1)
    ]
    p, e = page.project.id, page.environment
    return {
        "incident": incident,
        "data": data,
        "rows": rows,
        "columns": columns,
        "documents": [
            {**d, "link": reverse("web:document", args=[p, e, d["resource"], d["document"]])}
            for d in data["documents"]
        ],
        "sessions": [
            {**s, "link": reverse("web:session", args=[p, e, s["id"]])} for s in data["sessions"]
        ],
        "report": report,
        # The operations the report shown names (a report kept before they were named
        # has no `queued` or `pending`).
        "dead_letters": shown.get("deadLetters", []),
        "queued": shown.get("queued", []),
        "pending": shown.get("pending", []),
        "applicable": contain_services.applicable(incident),
    }


def _dry_run_asks(request: HttpRequest) -> str | None:
    """The incident's page is everyone's; its dry run (`?dryRun=true`) is support's."""
    return INCIDENTS if request.GET.get("dryRun") == "true" else None


@require_GET
@project_view(READ, asks=_dry_run_asks)
def incident_detail(request: HttpRequest, page: Page, i: str) -> HttpResponseBase:
    incident = incident_services.incident_get(
        project=page.project, environment=page.environment, incident_id=i
    )
    report = None
    if request.GET.get("dryRun") == "true":
        # What containing would do, written nowhere: a page of its own address, so a reload
        # or the back button shows it again instead of asking to send a form again.
        report = contain_services.incident_contain(
            incident=incident, dry_run=True, actions=None, actor=actor(request)
        )
    context = _context(page, incident, report)
    return page_render(request, "memoryadmin/incident.html", page, context)


def _plan(report: dict[str, Any]) -> list[dict[str, Any]]:
    """A dry run's report, action by action: how many nodes each outcome would reach."""
    tally: dict[str, dict[str, int]] = {action: {} for action in report["actions"]}
    for node in report["nodes"]:
        for action, outcome in node["outcomes"].items():
            counts = tally.setdefault(action, {})
            counts[outcome] = counts.get(outcome, 0) + 1
    return [
        {"action": action, "outcomes": sorted(counts.items())} for action, counts in tally.items()
    ]


def _is_dry_run(request: HttpRequest) -> bool:
    return request.method == "POST" and request.POST.get("dryRun") == "true"


def _freezes_only(request: HttpRequest) -> bool:
    return request.POST.getlist("action") == [contain_services.FREEZE]


def _contain_asks(request: HttpRequest) -> str | None:
    """A dry run needs only the view's own permission; a freeze alone, freezing; anything
    else (asking first included), containing."""
    if _is_dry_run(request):
        return None
    return FREEZE if _freezes_only(request) else CONTAIN


@require_http_methods(["GET", "POST"])
@project_view(INCIDENTS, asks=_contain_asks)
def incident_contain(request: HttpRequest, page: Page, i: str) -> HttpResponseBase:
    """A dry run (support and owners) shows the report; a freeze alone (support and owners)
    writes it and comes back to the incident. A containment (owners) asks first: GET, or a
    POST without `confirm=yes`, shows what it would do (a dry run, writing nothing); the
    confirmed POST writes it."""
    incident = incident_services.incident_get(
        project=page.project, environment=page.environment, incident_id=i
    )
    dry_run = _is_dry_run(request)
    actions = request.POST.getlist("action") or None
    freeze_only = _freezes_only(request)
    confirmed = request.method == "POST" and (freeze_only or request.POST.get("confirm") == "yes")
    if not dry_run and not confirmed:
        report = contain_services.incident_contain(
            incident=incident, dry_run=True, actions=actions, actor=actor(request)
        )
        context = {"incident": incident, "report": report, "plan": _plan(report)}
        return page_render(
            request, "memoryadmin/incident_contain.html", page, context, partial="dialog"
        )
    report = contain_services.incident_contain(
        incident=incident, dry_run=dry_run, actions=actions, actor=actor(request)
    )
    if dry_run:
        context = _context(page, incident, report)
        return page_render(request, "memoryadmin/incident.html", page, context)
    said = f"{', '.join(report['actions'])}: {report['changed']} changes."
    if report["deadLetters"]:
        said += f" {len(report['deadLetters'])} dead letters."
    if report["queued"]:
        said += f" Queued at the provider: {', '.join(report['queued'])}."
    if report["pending"]:
        said += f" Writes not finished at the provider: {', '.join(report['pending'])}."
    messages.success(request, said)
    return redirect("web:incident", page.project.id, page.environment, incident.id)
