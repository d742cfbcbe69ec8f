"""PostgreSQL only: the filter's trigram indexes take new entries directly.

With GIN's default `fastupdate`, every document write (an UPDATE that cannot
be HOT, since the search vector changes with the text) appends the row's
trigrams to each index's pending list, which every filter then scans in
full until vacuum or a 4 MB list merges it: after a few thousand writes a
term that matches nothing cost ten times as much. Without `fastupdate`,
writes insert into the index at once, which measured no slower.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

INDEXES = ("document_title_trgm", "document_id_trgm")


def forwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in INDEXES:
        schema_editor.execute(f"ALTER INDEX IF EXISTS {name} SET (fastupdate = off)")


def backwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in INDEXES:
        schema_editor.execute(f"ALTER INDEX IF EXISTS {name} RESET (fastupdate)")


class Migration(migrations.Migration):
    dependencies = [("memory", "0008_version_redaction")]

    operations = [migrations.RunPython(forwards, backwards)]
