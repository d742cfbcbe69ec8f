"""SQLite only: the words index finds a resource's documents by rowid range.

Until now the FTS5 words table held the resource as a token of a `scope`
column and every search ANDed it into its MATCH. bm25 counts, once per query,
the rows of every phrase of the MATCH, the scope too: a search paid for every
document of the resource (2.5 ms per 100,000 documents) even for a word in ten
of them. Now the table's rowid is the resource's primary key times 2**40 plus
the document's, and a search reads one rowid range per resource: no scope
phrase, the same scores. The trigram table (ids and titles, never ranked)
keeps its scope column.

A rowid holds resources up to 2**23 - 1 and documents up to 2**40 - 1.
"""

from __future__ import annotations

import importlib
from typing import Any

from django.db import migrations

# The statements of the migration this one changes (for its trigram table and for going back).
_EARLIER = importlib.import_module("memoryadmin.memory.migrations.0007_document_search")

# The rowids of one resource: [pk * RESOURCE_SPAN, (pk + 1) * RESOURCE_SPAN).
RESOURCE_SPAN = 1 << 40

_WORDS_ROW = (
    f"new.resource_id * {RESOURCE_SPAN} + new.id, new.doc_id, new.title, new.summary, new.text"
)
_TRIGRAMS_ROW = _EARLIER._TRIGRAMS_ROW
_INSERT = f"""
    INSERT INTO memory_document_fts (rowid, doc_id, title, summary, text)
        SELECT {_WORDS_ROW} WHERE NOT new.deleted;
    INSERT INTO memory_document_trigram (rowid, scope, doc_id, title)
        SELECT {_TRIGRAMS_ROW} WHERE NOT new.deleted;
"""
_DELETE = f"""
    DELETE FROM memory_document_fts WHERE rowid = old.resource_id * {RESOURCE_SPAN} + old.id;
    DELETE FROM memory_document_trigram WHERE rowid = old.id;
"""
# As in 0007: a deleted document's words leave the index file at once only after a merge.
_PURGE = _EARLIER._PURGE
_DROP = [
    "DROP TRIGGER IF EXISTS memory_document_search_au",
    "DROP TRIGGER IF EXISTS memory_document_search_ad",
    "DROP TRIGGER IF EXISTS memory_document_search_ai",
    "DROP TABLE IF EXISTS memory_document_fts",
]
SQLITE_FORWARD = [
    *_DROP,
    """
    CREATE VIRTUAL TABLE memory_document_fts USING fts5(
        doc_id, title, summary, text,
        tokenize = 'unicode61 remove_diacritics 2', prefix = '2 3'
    )
    """,
    f"CREATE TRIGGER memory_document_search_ai AFTER INSERT ON memory_document BEGIN {_INSERT} END",
    f"CREATE TRIGGER memory_document_search_ad AFTER DELETE ON memory_document BEGIN {_DELETE} END",
    f"""
    CREATE TRIGGER memory_document_search_au
    AFTER UPDATE OF resource_id, doc_id, title, summary, text, deleted ON memory_document
    BEGIN {_DELETE} {_INSERT} {_PURGE} END
    """,
    f"""
    INSERT INTO memory_document_fts (rowid, doc_id, title, summary, text)
        SELECT {_WORDS_ROW.replace("new.", "")} FROM memory_document WHERE NOT deleted
    """,
]


def forward(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "sqlite":
        for statement in SQLITE_FORWARD:
            schema_editor.execute(statement)


def backward(apps: Any, schema_editor: Any) -> None:
    """Back to 0007's words table: its statements, minus the trigram table (kept)."""
    if schema_editor.connection.vendor != "sqlite":
        return
    for statement in _DROP:
        schema_editor.execute(statement)
    for statement in _EARLIER.SQLITE_FORWARD:
        if "memory_document_trigram" in statement and "memory_document_fts" not in statement:
            continue  # the trigram table and its rows are still there
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("memory", "0010_document_search_direct")]

    operations = [migrations.RunPython(forward, backward)]
