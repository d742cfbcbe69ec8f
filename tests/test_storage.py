"""How PostgreSQL stores the long values the hot paths write: a document's text, its
versions' and a recall's memory are compressed with lz4 where the server has it (memory
migration 0013, agents migration 0011), which costs a write less CPU than pglz."""

from __future__ import annotations

import random
from typing import Any

import pytest
from django.db import connection

from memoryadmin.agents.services.runtime import recall_create
from memoryadmin.core.compression import lz4_available
from memoryadmin.memory.models import Project, Resource
from memoryadmin.memory.services.documents import document_create
from tests.helpers import support_session

WORDS = [
    "agent",
    "memory",
    "note",
    "refund",
    "shipping",
    "policy",
    "ticket",
    "weekly",
    "report",
    "exercise",
    "demo",
]


def _prose(size: int) -> str:
    """Text that compresses as prose does (not a run of one character)."""
    chosen = random.Random(7).choices(WORDS, k=size)
    return " ".join(chosen)[:size]


def _compression(sql: str, params: list[Any]) -> list[str | None]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.postgres
@pytest.mark.django_db
def test_long_texts_and_recalls_are_written_compressed_by_lz4(
    project: Project, notes: Resource
) -> None:
    expected = "lz4" if lz4_available(connection) else "pglz"
    document = document_create(
        resource=notes, doc_id="workshop", title="Workshop", text=_prose(6000), actor="test"
    )
    session = support_session(project)

    answer = recall_create(session=session, use=["notes"])

    assert answer["memory"]["notes"]["text"] == document.text
    assert _compression(
        "SELECT pg_column_compression(text) FROM memory_document WHERE id = %s", [document.pk]
    ) == [expected]
    assert _compression(
        "SELECT pg_column_compression(text) FROM memory_documentversion WHERE document_id = %s",
        [document.pk],
    ) == [expected]
    assert _compression(
        "SELECT pg_column_compression(memory) FROM agents_recall WHERE session_id = %s",
        [session.pk],
    ) == [expected]
    # A short text is not compressed at all.
    short = document_create(resource=notes, doc_id="card", title="Card", text="x", actor="t")
    assert _compression(
        "SELECT pg_column_compression(text) FROM memory_document WHERE id = %s", [short.pk]
    ) == [None]
