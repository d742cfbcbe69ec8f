"""The one keyset pager behind every listing: order, ties, and cursors it refuses."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db.models import QuerySet
from django.utils import timezone

from memoryadmin.agents.models import Session
from memoryadmin.agents.services.sessions import session_create, session_list
from memoryadmin.core.cursors import cursor_dump, keyset_page
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.memory.models import Document, DocumentVersion, Project, Resource
from memoryadmin.memory.services.documents import document_list, version_list


def walk(page: Any) -> list[list[Any]]:
    """Every page of a listing, following nextCursor from the first page."""
    pages, cursor = [], None
    while True:
        rows, cursor = page(cursor)
        pages.append(rows)
        if cursor is None:
            return pages


def test_documents_with_equal_updated_at_page_by_id_each_once(
    notes: Resource, make_document: Any
) -> None:
    for doc_id in ["e", "c", "a", "d", "b", "f", "g"]:
        make_document(doc_id)
    tied = timezone.now()
    Document.objects.filter(doc_id__in=["a", "b", "c", "d", "e"]).update(updated_at=tied)
    Document.objects.filter(doc_id="f").update(updated_at=tied + timedelta(seconds=1))
    Document.objects.filter(doc_id="g").update(updated_at=tied - timedelta(seconds=1))
    pages = walk(lambda c: document_list(resource=notes, cursor=c, limit=2))
    assert [[row["doc_id"] for row in rows] for rows in pages] == [
        ["f", "a"],
        ["b", "c"],
        ["d", "e"],
        ["g"],
    ]


def test_sessions_with_equal_created_at_page_by_id_each_once(project: Project) -> None:
    ids = [
        session_create(
            project=project, agent_id="support-bot@development", idempotency_key=f"k{i}", actor="t"
        )[0].id
        for i in range(5)
    ]
    Session.objects.update(created_at=timezone.now())
    pages = walk(
        lambda c: session_list(project=project, environment="development", cursor=c, limit=2)
    )
    assert [len(rows) for rows in pages] == [2, 2, 1]
    assert [s.id for rows in pages for s in rows] == sorted(ids)


def test_versions_page_newest_first(make_document: Any) -> None:
    document = make_document("workshop")
    for n in range(4):
        DocumentVersion.objects.create(
            document=document, revision=f"r{n}", action="update", created_at=timezone.now()
        )
    expected = list(
        DocumentVersion.objects.filter(document=document)
        .order_by("-id")
        .values_list("revision", flat=True)
    )
    pages = walk(lambda c: version_list(document=document, cursor=c, limit=2))
    assert [v.revision for rows in pages for v in rows] == expected
    assert [len(rows) for rows in pages] == [2, 2, 1]


def _documents(resource: Resource) -> QuerySet[Any, Any]:
    return Document.objects.filter(resource=resource).values("doc_id", "updated_at")


BY_TIME = ("-updated_at", "doc_id")
BY_ID = ("-id",)


@pytest.mark.parametrize(
    ("order", "position"),
    [
        (BY_TIME, []),
        (BY_TIME, ["2026-01-01T00:00:00+00:00"]),
        (BY_TIME, ["2026-01-01T00:00:00+00:00", "a", "b"]),
        (BY_TIME, ["not a time", "a"]),
        (BY_TIME, [1767225600, "a"]),
        (BY_TIME, ["2026-01-01T00:00:00+00:00", 7]),
        (BY_TIME, ["2026-01-01T00:00:00+00:00", None]),
        (BY_ID, []),
        (BY_ID, ["1"]),
        (BY_ID, [True]),
        (BY_ID, [1.5]),
        (BY_ID, [1, 2]),
    ],
)
def test_a_signed_position_of_another_shape_is_refused(
    notes: Resource, order: tuple[str, ...], position: list[Any]
) -> None:
    rows = _documents(notes) if order == BY_TIME else DocumentVersion.objects.all()
    cursor = cursor_dump(position, scope="t")
    with pytest.raises(InvalidRequest, match="cursor is not valid for this list"):
        keyset_page(rows, order=order, cursor=cursor, scope="t", limit=2)


def test_a_cursor_is_valid_only_for_its_own_list(notes: Resource, make_document: Any) -> None:
    for doc_id in "abc":
        make_document(doc_id)
    _, cursor = keyset_page(_documents(notes), order=BY_TIME, cursor=None, scope="one", limit=1)
    assert cursor is not None
    with pytest.raises(InvalidRequest):
        keyset_page(_documents(notes), order=BY_TIME, cursor=cursor, scope="two", limit=1)
