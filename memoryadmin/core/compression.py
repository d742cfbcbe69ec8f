"""How PostgreSQL compresses long values (TOAST), for the migrations that choose lz4 for
the columns written on the hot paths (a document's text and a version's; a recall's
`memory` since agents migration 0011).

Used by migrations (and by tests/test_storage.py to know what to expect): a change here
changes what they do on a new database.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def lz4_available(connection: Any) -> bool:
    """Whether the database of `connection` (a migration's `schema_editor.connection`) is
    PostgreSQL built with lz4 (`default_toast_compression` offers it)."""
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def column_compression(
    columns: Sequence[tuple[str, str]], method: str
) -> Callable[[Any, Any], None]:
    """A migration's function that sets the compression of `(table, column)`s to
    `method` ("lz4", or "default" to undo), where lz4 is available (elsewhere nothing).
    Only values written afterwards are compressed that way; no row is rewritten."""

    def set_compression(apps: Any, schema_editor: Any) -> None:
        if lz4_available(schema_editor.connection):
            quote = schema_editor.quote_name
            for table, column in columns:
                schema_editor.execute(
                    f"ALTER TABLE {quote(table)} ALTER COLUMN {quote(column)}"
                    f" SET COMPRESSION {method}"
                )

    return set_compression
