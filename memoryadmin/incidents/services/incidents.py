"""Open an incident (trace its source), list and read incidents; one rule book for every
door (API, Memory page, CLI)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.models import TextField
from django.db.models.functions import Cast
from django.utils import timezone

from memoryadmin.core.cursors import keyset_page
from memoryadmin.core.environments import check_environment
from memoryadmin.core.erasing import RedactedVersion, rows_erase
from memoryadmin.core.errors import NotFound
from memoryadmin.incidents.models import Incident
from memoryadmin.incidents.services.trace import (
    TITLE_MAX,
    check_hops,
    check_source,
    check_title,
    trace_graph,
)
from memoryadmin.memory.models import Project
from memoryadmin.memory.representations import iso_ms
from memoryadmin.memory.services.audit import audit_record

INCIDENT_PAGE_SIZE = 50


class IncidentNotFound(NotFound):
    code = "incident_not_found"


def new_incident_id() -> str:
    return "inc_" + secrets.token_hex(12)


def incident_create(
    *, project: Project, environment: str, title: object, source: object, hops: object, actor: str
) -> Incident:
    """Traces `source` and keeps the incident with its graph; audited (`incident.create`)."""
    check_environment(environment)
    checked_title, checked_source = check_title(title), check_source(source)
    checked_hops = check_hops(hops)
    graph = trace_graph(
        project=project, environment=environment, source=checked_source, hops=checked_hops
    )
    with transaction.atomic():
        incident = Incident.objects.create(
            id=new_incident_id(),
            project=project,
            environment=environment,
            title=checked_title,
            source=checked_source,
            hops=checked_hops,
            graph=graph,
            created_by=actor,
            created_at=timezone.now(),
        )
        audit_record(
            project_id=project.id,
            environment=environment,
            actor=actor,
            action="incident.create",
            detail={
                "incident": incident.id,
                "source": next(iter(checked_source)),
                "hops": checked_hops,
                "nodes": len(graph["nodes"]),
            },
        )
    return incident


def incident_get(*, project: Project, environment: str, incident_id: str) -> Incident:
    check_environment(environment)
    found = Incident.objects.filter(
        project=project, environment=environment, pk=incident_id
    ).first()
    if found is None:
        raise IncidentNotFound(f"No incident '{incident_id}' in {environment}.")
    return found


def incident_list(
    *,
    project: Project,
    environment: str,
    cursor: str | None = None,
    limit: int = INCIDENT_PAGE_SIZE,
) -> tuple[list[Incident], str | None]:
    check_environment(environment)
    rows = Incident.objects.filter(project=project, environment=environment).defer("graph")
    return keyset_page(
        rows,
        order=("-created_at", "id"),
        cursor=cursor,
        scope=f"incidents:{project.id}:{environment}",
        limit=limit,
    )


def incidents_erase(
    *, project_id: str, environment: str, needles: Sequence[str], apply: bool
) -> dict[str, int]:
    """An erasure's part here: the incidents of one environment whose title, source,
    graph or containment report (a conflict's merge is document text) hold any of
    `needles`, the text replaced with `apply`; how many there are."""
    held = rows_erase(
        Incident.objects.filter(project_id=project_id, environment=environment),
        needles,
        text=("title",),
        json_=("source", "graph", "containment"),
        # The marker may be longer than the text it replaces: the title keeps its column.
        fit={"title": lambda title: title[:TITLE_MAX]},
        apply=apply,
    )
    return {"incidents": held}


def incidents_redact(*, version: RedactedVersion, marker: str) -> int:
    """A redaction's part here: a containment report's merges made from the version,
    replaced with `marker`; how many incidents changed.

    A conflict's merge applies the undo (the tainted versions back to the one before
    them, `restoreRevision`) to the text then current (`currentRevision`), so it is made
    from each of those versions of its document. The rest of an incident holds no
    version's text: its graph and report name versions by revision, its title and a
    text source are what the owner typed (an erasure of that text reaches them)."""
    rows = (
        Incident.objects.filter(project_id=version.project_id, environment=version.environment)
        .alias(raw=Cast("containment", TextField()))
        .filter(raw__contains=version.revision)
    )
    document = (version.resource_id, version.doc_id)
    changed = 0
    for incident in rows:
        tainted = {
            node.get("revision")
            for node in incident.graph.get("nodes", [])
            if node.get("kind") == "version"
            and (node.get("resource"), node.get("document")) == document
        }
        merged = False
        for entry in incident.containment.get("documents", []):
            of = (entry.get("resource"), entry.get("documentId"))
            if of != document or entry.get("merged") in (None, marker):
                continue
            made_from = tainted | {entry.get("restoreRevision"), entry.get("currentRevision")}
            if version.revision in made_from:
                entry["merged"] = marker
                merged = True
        if merged:
            Incident.objects.filter(pk=incident.pk).update(containment=incident.containment)
            changed += 1
    return changed


def _counts(graph: dict[str, Any]) -> dict[str, int]:
    counts = {"version": 0, "recall": 0, "session": 0, "record": 0}
    for node in graph.get("nodes", []):
        counts[node["kind"]] += 1
    return counts


def affected(graph: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Every affected document (resource, document) and session of a graph, in order."""
    documents = sorted(
        {(n["resource"], n["document"]) for n in graph.get("nodes", []) if n["kind"] == "version"}
    )
    sessions = sorted(
        (n["id"].removeprefix("session:"), n["hop"], n.get("status", ""))
        for n in graph.get("nodes", [])
        if n["kind"] == "session"
    )
    return {
        "documents": [{"resource": r, "document": d} for r, d in documents],
        "sessions": [{"id": s, "hop": h, "status": st} for s, h, st in sessions],
    }


def incident_summary(incident: Incident) -> dict[str, Any]:
    return {
        "id": incident.id,
        "title": incident.title,
        "source": incident.source,
        "hops": incident.hops,
        "createdBy": incident.created_by,
        "createdAt": iso_ms(incident.created_at),
        "containedAt": iso_ms(incident.contained_at) if incident.contained_at else None,
    }


def incident_dict(incident: Incident) -> dict[str, Any]:
    graph = incident.graph
    return {
        **incident_summary(incident),
        "counts": _counts(graph),
        **affected(graph),
        "graph": {"nodes": graph.get("nodes", []), "edges": graph.get("edges", [])},
        "containment": incident.containment or None,
    }
