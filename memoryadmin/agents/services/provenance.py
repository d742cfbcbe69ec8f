"""What each recall put in front of the model, and which sessions read a version."""

from __future__ import annotations

import contextlib
import functools
import re
from typing import Any, Literal

from django.db import connection, transaction

from memoryadmin.agents.models import Binding, Recall, RecallSource, Session, SessionStatus
from memoryadmin.core.cursors import keyset_page
from memoryadmin.core.rows import (
    column,
    concrete_names,
    database_vendor,
    insert_sql,
    inserted,
    prepared,
    statement_cursor,
    table,
)
from memoryadmin.memory.models import Document, Project

RECALL_PAGE_SIZE = 20
READERS_MAX = 50


# A recall source as stored: (resource pk, document id, revision). Plain values, not
# model instances: a recall of many documents would spend longer building those.
SourceRow = tuple[int, str, str]


def recall_sources(
    *, bindings: list[Binding], sources: dict[str, list[dict[str, Any]]]
) -> list[SourceRow]:
    """One row per document revision the recall showed (document and collection
    bindings: their sources carry a revision)."""
    return [
        (binding.resource_id, source["id"], source["revision"])
        for binding in bindings
        if binding.resource.keeps_documents
        for source in sources.get(binding.resource.resource_id, [])
        if isinstance(source.get("revision"), str)
    ]


_SOURCE_FIELDS = ("resource", "doc_id", "revision")


def _recall_insert_sql(vendor: str) -> str:
    """The recall's INSERT, made only while its session is active and its project's
    erasure epoch is the one the recall read with its memory: a session ended (by its
    host, an owner or an incident's containment), or an erasure committed, while the
    recall read its memory or waited on its providers stores no recall (`recall_store`).
    `INSERT ... SELECT`: on PostgreSQL each value cast to its column's type, which
    `VALUES` would infer.

    On PostgreSQL the epoch's row is read FOR KEY SHARE, which the erasure's FOR UPDATE
    of it excludes (memory's `erasure_epoch_advance`): a store racing an erasure waits for
    its commit and then reads the new epoch (the row's latest version, as a locking read
    does), and an erasure that comes second waits for the recall's commit, then finds and
    erases its row. SQLite's writers take turns whole (IMMEDIATE transactions): the plain
    comparison is enough there."""
    names = concrete_names(Recall)
    targets = ", ".join(column(Recall, name) for name in names)
    if vendor == "postgresql":
        fields = [Recall._meta.get_field(name) for name in names]
        # The type without its length (`varchar(40)` as `varchar`): a cast to a length
        # cuts a longer text, where the column's own assignment refuses it.
        values = ", ".join(
            f"%s::{re.sub(r'\(\d+\)$', '', str(field.db_type(connection)))}" for field in fields
        )
    else:
        values = ", ".join(["%s"] * len(names))
    active = (
        f"SELECT 1 FROM {table(Session)} WHERE {column(Session, 'id')} = %s"
        f" AND {column(Session, 'status')} = '{SessionStatus.ACTIVE.value}'"
    )
    unerased = (
        f"SELECT 1 FROM {table(Project)} WHERE {column(Project, 'id')} = %s"
        f" AND {column(Project, 'erasure_epoch')} = %s"
        + (" FOR KEY SHARE" if vendor == "postgresql" else "")
    )
    return (
        f"INSERT INTO {table(Recall)} ({targets}) SELECT {values}"
        f" WHERE EXISTS ({active}) AND EXISTS ({unerased})"
    )


@functools.lru_cache(maxsize=64)
def _store_sql(vendor: str, sources: int) -> tuple[str, str | None]:
    """The recall's INSERT with `sources` source rows: on PostgreSQL one statement (the
    sources' INSERT reads the recall row a `WITH` clause inserted), elsewhere the
    recall's INSERT and the sources' (None without sources)."""
    recall = _recall_insert_sql(vendor)
    if not sources:
        return recall, None
    if vendor != "postgresql":
        return recall, insert_sql(RecallSource, ("recall", *_SOURCE_FIELDS), sources)
    targets = ", ".join(column(RecallSource, n) for n in ("recall", *_SOURCE_FIELDS))
    rows = ", ".join(["(%s, %s, %s)"] * sources)
    together = (
        f"WITH stored AS ({recall} RETURNING {column(Recall, 'id')})"
        f" INSERT INTO {table(RecallSource)} ({targets})"
        f" SELECT stored.{column(Recall, 'id')}, v.resource_id, v.doc_id, v.revision"
        f" FROM stored, (VALUES {rows}) AS v (resource_id, doc_id, revision)"
    )
    return together, None


# What became of a recall `recall_store` was given.
Stored = Literal["stored", "session_ended", "erased"]


def recall_store(*, recall: Recall, sources: list[SourceRow], erasure_epoch: int) -> Stored:
    """Inserts the recall and its sources: on PostgreSQL in one statement, elsewhere two.
    Its JSON (the `memory` the model was shown) is encoded once, by orjson.

    Committed durably before the answer goes out (the server's own synchronous
    commit, as for every other write): an incident's trace rests on who read what,
    so a recall whose answer reached the host is on disk. Concurrent recalls share
    their WAL flushes (PostgreSQL's group commit).

    Two statements are one transaction: a recall is never stored without its
    sources. One statement is atomic by itself and needs none, but a recall under a
    request id can collide with a concurrent retry's (IntegrityError, for the caller to
    resolve), which a transaction around it survives only behind a savepoint.

    Nothing is stored (`_recall_insert_sql`) when the session is no longer active
    ("session_ended") or an erasure of the project committed since the recall read
    `erasure_epoch` with its memory ("erased": what it read may hold the erased text).
    An ended session is named first where both happened."""
    sql, sources_sql = _store_sql(database_vendor(), len(sources))
    project_id = recall.session.project_id
    params = [
        *prepared(recall, concrete_names(Recall)),
        recall.session_id,
        project_id,
        erasure_epoch,
    ]
    guarded = sources_sql is not None or (bool(recall.request_id) and connection.in_atomic_block)
    with (
        transaction.atomic() if guarded else contextlib.nullcontext(),
        (kept := statement_cursor(sql)) as cursor,
    ):
        if sources_sql is None:
            # With sources, one row each or none (the recall row not made).
            cursor.execute(kept.statement, params + [v for source in sources for v in source])
            stored = cursor.rowcount != 0
        else:
            cursor.execute(kept.statement, params)
            stored = cursor.rowcount != 0
            if stored:
                cursor.execute(sources_sql, [v for source in sources for v in (recall.id, *source)])
    if not stored:
        # Which guard refused it: read only on this rare path.
        active = Session.objects.active().filter(pk=recall.session_id).exists()
        return "erased" if active else "session_ended"
    inserted(recall)
    return "stored"


def tool_sources_store(*, recall: Recall, binding: Binding, shown: list[tuple[str, str]]) -> None:
    """Adds the documents a memory tool put in front of the model (`shown`: id and
    revision each; memory_read's document, a page of memory_list, memory_search's hits)
    to the sources of the recall the tool call answered: the trace follows them as it
    follows what the recall showed, so a model that read a version by a tool is one of its
    readers. Committed before the tool's answer, as the recall's own are."""
    if not shown:
        return
    RecallSource.objects.bulk_create(
        RecallSource(recall_id=recall.id, resource_id=binding.resource_id, doc_id=d, revision=r)
        for d, r in shown
    )


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
