"""PostgreSQL only: trigram indexes serving the document list's filter.

The filter is `UPPER(doc_id) LIKE 'TERM%' OR UPPER(title) LIKE '%TERM%'`
(Django's istartswith and icontains); a GIN trigram index on each expression
lets PostgreSQL answer it from the indexes, so a rare or absent term costs
as little as a common one. pg_trgm is a trusted extension (PostgreSQL 13+):
the database's owner may create it. Other databases keep the plain scan.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

INDEXES = {
    "document_title_trgm": "UPPER(title)",
    "document_id_trgm": "UPPER(doc_id)",
}


def forwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    for name, expression in INDEXES.items():
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON memory_document"
            f" USING gin (({expression}) gin_trgm_ops)"
        )


def backwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("memory", "0005_version_by_session")]

    operations = [migrations.RunPython(forwards, backwards)]
