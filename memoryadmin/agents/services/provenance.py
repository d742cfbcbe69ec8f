"""What each recall put in front of the model, and which sessions read a version."""

from __future__ import annotations

from typing import Any

from memoryadmin.agents.models import Binding, Recall, RecallSource, Session
from memoryadmin.memory.cursors import keyset_page
from memoryadmin.memory.models import Document

RECALL_PAGE_SIZE = 20
READERS_MAX = 50


def recall_sources_record(
    *, recall: Recall, bindings: list[Binding], sources: dict[str, list[dict[str, Any]]]
) -> None:
    """One row per document revision the recall showed (document and collection
    bindings: their sources carry a revision), in one statement."""
    rows = [
        RecallSource(
            recall=recall,
            resource_id=binding.resource_id,
            doc_id=source["id"],
            revision=source["revision"],
        )
        for binding in bindings
        if binding.resource.keeps_documents
        for source in sources.get(binding.resource.resource_id, [])
        if isinstance(source.get("revision"), str)
    ]
    if rows:
        RecallSource.objects.bulk_create(rows)


def recall_list(
    *, session: Session, cursor: str | None = None, limit: int = RECALL_PAGE_SIZE
) -> tuple[list[Recall], str | None]:
    """A session's recalls, newest first: what the model was given each time."""
    return keyset_page(
        Recall.objects.filter(session=session),
        order=("-created_at", "id"),
        cursor=cursor,
        scope=f"recalls:{session.id}",
        limit=limit,
    )


def version_readers(*, document: Document, revision: str) -> list[Recall]:
    """The newest recalls that showed this revision of the document to a model."""
    return list(
        Recall.objects.filter(
            sources__resource_id=document.resource_id,
            sources__doc_id=document.doc_id,
            sources__revision=revision,
        )
        .select_related("session")
        .order_by("-created_at")[:READERS_MAX]
    )
