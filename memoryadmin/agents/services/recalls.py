"""What recalls keep of a document version, and how a redaction or an erasure takes it out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import TextField
from django.db.models.functions import Cast

from memoryadmin.agents.models import Binding, Recall, Scope, SessionEvent
from memoryadmin.core.erasing import RedactedVersion, rows_erase


def recalls_redact(*, version: RedactedVersion, marker: str) -> int:
    """A redaction's part here: what recalls showed of the version, replaced with
    `marker`; returns how many recalls changed. Session events and recalls' provider
    cursors name versions (ids, revision, size) but never hold their text.

    A document binding's projection is that document's text; a collection's is
    one `id | title | summary | day` line per document. Either way the source
    names the revision it was built from.
    """
    recalls = (
        Recall.objects.filter(
            session__project_id=version.project_id, session__environment=version.environment
        )
        .annotate(raw=Cast("memory", TextField()))
        .filter(raw__contains=version.revision)
    )
    changed = 0
    for recall in recalls:
        projection = recall.memory.get(version.resource_id)
        if not isinstance(projection, dict):
            continue
        if not _scrub_projection(projection, recall, version, marker):
            continue
        Recall.objects.filter(pk=recall.pk).update(memory=recall.memory)
        changed += 1
    return changed


def _scrub_projection(
    projection: dict[str, Any], recall: Recall, version: RedactedVersion, marker: str
) -> bool:
    doc_id = version.doc_id
    sources = [
        s
        for s in projection.get("sources", [])
        if s.get("id") == doc_id and s.get("revision") == version.revision
    ]
    if not sources:
        return False
    for source in sources:
        source["title"] = marker
    scope = (
        Binding.objects.filter(session_id=recall.session_id, resource_id=version.resource_key)
        .values_list("scope", flat=True)
        .first()
    )
    if scope == Scope.DOCUMENT:
        projection["text"] = marker
    else:
        lines = projection.get("text", "").split("\n")
        prefix = f"{doc_id} | "
        projection["text"] = "\n".join(
            f"{prefix}{marker} | {marker} | {line.rsplit(' | ', 1)[-1]}"
            if line.startswith(prefix)
            else line
            for line in lines
        )
    return True


def recalls_erase(
    *, project_id: str, environment: str, needles: Sequence[str], apply: bool
) -> dict[str, int]:
    """What recalls kept (projections and cursors) and session events hold of any of
    `needles`, the text replaced: counts of recalls and of events."""
    session = {"session__project_id": project_id, "session__environment": environment}
    return {
        "recalls": rows_erase(
            Recall.objects.filter(**session), needles, json_=("memory", "cursors"), apply=apply
        ),
        "sessionEvents": rows_erase(
            SessionEvent.objects.filter(**session), needles, json_=("data",), apply=apply
        ),
    }
