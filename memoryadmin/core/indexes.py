"""An index added without stopping writes, for migrations of tables that may be large.

`AddIndexOnline` is Django's `AddIndex` that PostgreSQL builds with `CREATE INDEX
CONCURRENTLY`: writes to the table go on while it is built (a plain `CREATE INDEX` holds
them until it is done: minutes on a table of years). Its migration sets `atomic = False`
(PostgreSQL builds it outside a transaction). Other databases add it as `AddIndex` does.

A concurrent build that fails (the migration interrupted, a deadlock, a cancelled
statement) leaves its index behind, invalid: never used, still written on every insert,
and in the way of the next attempt ("already exists"). Running the migration again drops
such an index first, then builds it.
"""

from __future__ import annotations

from typing import Any

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db.migrations.operations import AddIndex


class AddIndexOnline(AddIndexConcurrently):
    def describe(self) -> str:
        return AddIndex.describe(self)

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor == "postgresql":
            _invalid_index_drop(schema_editor, self.index.name)
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        else:
            AddIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
        else:
            AddIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)


def _invalid_index_drop(schema_editor: Any, name: str) -> None:
    """Drops the index `name` when a failed concurrent build left it invalid."""
    quoted = schema_editor.quote_name(name)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT NOT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [quoted]
        )
        row = cursor.fetchone()
    if row is not None and row[0]:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {quoted}")
