"""Full-text search over live documents, kept by the database itself.

PostgreSQL: a generated tsvector column (id and title weighted A, summary B,
text C; punctuation separates words, as in FTS5's unicode61) with a GIN index;
substrings of ids and titles use the trigram indexes of 0006 (UPPER(doc_id),
UPPER(title)). SQLite: two FTS5 tables (words; trigrams of ids and titles) that
triggers keep in step with memory_document inside the writing statement, so
no write path can leave them stale and a deleted document leaves them at once.
The Document model does not know about any of it; only the search service
reads it.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

POSTGRES_FORWARD = [
    """
    ALTER TABLE memory_document ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('simple', regexp_replace(doc_id, '[[:punct:]]+', ' ', 'g')), 'A')
        || setweight(to_tsvector('simple', regexp_replace(title, '[[:punct:]]+', ' ', 'g')), 'A')
        || setweight(to_tsvector('simple', regexp_replace(summary, '[[:punct:]]+', ' ', 'g')), 'B')
        || setweight(to_tsvector('simple', regexp_replace(text, '[[:punct:]]+', ' ', 'g')), 'C')
    ) STORED
    """,
    "CREATE INDEX memory_document_search ON memory_document USING gin (search_vector)",
]
POSTGRES_BACKWARD = [
    "DROP INDEX IF EXISTS memory_document_search",
    "ALTER TABLE memory_document DROP COLUMN IF EXISTS search_vector",
]

# `scope` holds the resource (its primary key) as one token, so a search
# narrows to resources inside the full-text index.
_WORDS_ROW = "new.id, 'res' || new.resource_id, new.doc_id, new.title, new.summary, new.text"
_TRIGRAMS_ROW = "new.id, '<' || new.resource_id || '>', new.doc_id, new.title"
_INSERT = f"""
    INSERT INTO memory_document_fts (rowid, scope, doc_id, title, summary, text)
        SELECT {_WORDS_ROW} WHERE NOT new.deleted;
    INSERT INTO memory_document_trigram (rowid, scope, doc_id, title)
        SELECT {_TRIGRAMS_ROW} WHERE NOT new.deleted;
"""
_DELETE = """
    DELETE FROM memory_document_fts WHERE rowid = old.id;
    DELETE FROM memory_document_trigram WHERE rowid = old.id;
"""
# FTS5 keeps a removed row's terms in its segments until they are merged: a
# deleted document's words leave the index file at once only after a merge.
_PURGE = """
    INSERT INTO memory_document_fts (memory_document_fts)
        SELECT 'optimize' WHERE new.deleted AND NOT old.deleted;
    INSERT INTO memory_document_trigram (memory_document_trigram)
        SELECT 'optimize' WHERE new.deleted AND NOT old.deleted;
"""
SQLITE_FORWARD = [
    """
    CREATE VIRTUAL TABLE memory_document_fts USING fts5(
        scope, doc_id, title, summary, text,
        tokenize = 'unicode61 remove_diacritics 2', prefix = '2 3'
    )
    """,
    """
    CREATE VIRTUAL TABLE memory_document_trigram USING fts5(
        scope, doc_id, title, tokenize = 'trigram'
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
    INSERT INTO memory_document_fts (rowid, scope, doc_id, title, summary, text)
        SELECT {_WORDS_ROW.replace("new.", "")} FROM memory_document WHERE NOT deleted
    """,
    f"""
    INSERT INTO memory_document_trigram (rowid, scope, doc_id, title)
        SELECT {_TRIGRAMS_ROW.replace("new.", "")} FROM memory_document WHERE NOT deleted
    """,
]
SQLITE_BACKWARD = [
    "DROP TRIGGER IF EXISTS memory_document_search_au",
    "DROP TRIGGER IF EXISTS memory_document_search_ad",
    "DROP TRIGGER IF EXISTS memory_document_search_ai",
    "DROP TABLE IF EXISTS memory_document_trigram",
    "DROP TABLE IF EXISTS memory_document_fts",
]


def _run(statements: dict[str, list[str]]) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        for statement in statements.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0006_document_filter_trigram"),
    ]

    operations = [
        migrations.RunPython(
            _run({"postgresql": POSTGRES_FORWARD, "sqlite": SQLITE_FORWARD}),
            _run({"postgresql": POSTGRES_BACKWARD, "sqlite": SQLITE_BACKWARD}),
        ),
    ]
