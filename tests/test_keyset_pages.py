"""The one keyset pager behind every listing: order, ties, and cursors it refuses."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db.models import QuerySet
from django.utils import timezone

from memoryadmin.agents.models import Session
from memoryadmin.agents.services.sessions import session_create, session_list
from memoryadmin.core.cursors import cursor_dump, cursor_load, keyset_page
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.memory.models import Document, DocumentVersion, Project, Resource
from memoryadmin.memory.services.documents import (
    DOCUMENT_SORTS,
    LIST_FIELDS,
    document_list,
    version_list,
)


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
    notes: Resource, order: tuple[str] | tuple[str, str], position: list[Any]
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


@pytest.mark.parametrize("sort", list(DOCUMENT_SORTS))
def test_the_compiled_list_pages_as_the_orms_keyset_page(
    sort: str, notes: Resource, make_document: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unfiltered list's statements are composed once (documents._list_pages): its
    pages, ties and cursors are those of keyset_page over the same queryset."""
    for i, doc_id in enumerate(["e", "c", "a", "d", "b", "f", "g", "h", "i"]):
        make_document(doc_id, text="x" * (i % 3))
    tied = timezone.now()
    Document.objects.filter(doc_id__in=["a", "b", "c", "d", "e"]).update(updated_at=tied)
    Document.objects.filter(doc_id="f").update(updated_at=tied + timedelta(seconds=1))
    Document.objects.filter(doc_id="g").update(updated_at=tied - timedelta(microseconds=1))
    Document.objects.filter(doc_id="h").update(deleted=True)
    scope = f"documents:{notes.pk}" + ("" if sort == "updated" else f":{sort}")
    orm = walk(
        lambda c: keyset_page(
            Document.objects.live().filter(resource=notes).values(*LIST_FIELDS),
            order=DOCUMENT_SORTS[sort],
            cursor=c,
            scope=scope,
            limit=2,
        )
    )
    cursors: list[Any] = []

    def listed(cursor: Any) -> Any:
        rows, next_cursor = document_list(resource=notes, cursor=cursor, limit=2, sort=sort)
        cursors.append(next_cursor)
        return rows, next_cursor

    assert walk(listed) == orm
    assert sum(len(rows) for rows in orm) == 8  # every live document, once
    # The same cursors as keyset_page's: each reads the same next page either way, and
    # the next cursors hold the same position (a cursor is signed with the second it was
    # made in, so two made a second apart differ as text).
    for cursor in cursors[:-1]:
        rows, next_cursor = document_list(resource=notes, cursor=cursor, limit=2, sort=sort)
        orm_rows, orm_next = keyset_page(
            Document.objects.live().filter(resource=notes).values(*LIST_FIELDS),
            order=DOCUMENT_SORTS[sort],
            cursor=cursor,
            scope=scope,
            limit=2,
        )
        assert rows == orm_rows
        assert (next_cursor is None) == (orm_next is None)
        if next_cursor is not None:
            assert orm_next is not None
            assert cursor_load(next_cursor, scope=scope) == cursor_load(orm_next, scope=scope)
    # Composed once: walking the list again composes no statement.
    from django.db.models.sql.compiler import SQLCompiler

    composed = []
    as_sql = SQLCompiler.as_sql

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        composed.append(self.query.model)
        return as_sql(self, *args, **kwargs)

    monkeypatch.setattr(SQLCompiler, "as_sql", counted)
    assert walk(listed) == orm
    assert composed == []
    # A cursor of another sort or resource is refused as before.
    if len(cursors) > 1:
        other = "id" if sort != "id" else "size"
        with pytest.raises(InvalidRequest):
            document_list(resource=notes, cursor=cursors[0], limit=2, sort=other)
