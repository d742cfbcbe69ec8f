"""An index added without stopping writes, for migrations of tables that may be large.

`AddIndexOnline` is Django's `AddIndex` that PostgreSQL builds with `CREATE INDEX
CONCURRENTLY`: writes to the table go on while it is built (a plain `CREATE INDEX` holds
them until it is done: minutes on a table of years). Its migration sets `atomic = False`
(PostgreSQL builds it outside a transaction). Other databases add it as `AddIndex` does.
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
