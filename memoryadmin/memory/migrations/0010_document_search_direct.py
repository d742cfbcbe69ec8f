"""PostgreSQL only: the search's GIN index takes new entries directly.

As for the filter's trigram indexes (0009): with GIN's default `fastupdate`, every
document write appends the row's words to the index's pending list, which every
search then scans in full until vacuum or a 4 MB list merges it: after 3,000
writes a search for a word no document holds read 1,501 pages instead of 3.
Without it, a write inserts into the index at once.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

INDEX = "memory_document_search"


def forwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER INDEX IF EXISTS {INDEX} SET (fastupdate = off)")


def backwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER INDEX IF EXISTS {INDEX} RESET (fastupdate)")


class Migration(migrations.Migration):
    dependencies = [("memory", "0009_document_filter_trigram_direct")]

    operations = [migrations.RunPython(forwards, backwards)]
