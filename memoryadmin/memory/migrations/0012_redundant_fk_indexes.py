"""Three foreign keys lose the index of their own that a composite index already gives.

Each index is kept up on every write of its table, and a document write touches the
document, a new version and an audit entry. These three lead an index that stays:

- memory_document.resource_id: unique_document_id (resource_id, doc_id);
- memory_documentversion.document_id: unique_version_revision (document_id, revision)
  and version_newest_first (document_id, id DESC);
- memory_auditentry.project_id: audit_newest_first (project_id, environment, id DESC)
  and audit_by_document, plus, on PostgreSQL, its `_like` twin (no query matches a
  project id by pattern).

Only the indexes are dropped: Django's own AlterField would drop and re-add each
foreign key constraint on PostgreSQL (checking every row again) and rebuild the
tables on SQLite (dropping the search triggers on memory_document).
"""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

# (index, table, column), as Django named them (the same on SQLite and PostgreSQL).
INDEXES = [
    ("memory_document_resource_id_4a116038", "memory_document", "resource_id"),
    ("memory_documentversion_document_id_f08fc2ce", "memory_documentversion", "document_id"),
    ("memory_auditentry_project_id_c5abdd19", "memory_auditentry", "project_id"),
]
# PostgreSQL's twin of a varchar foreign key's index, for LIKE.
LIKE = ("memory_auditentry_project_id_c5abdd19_like", "memory_auditentry", "project_id")


def _indexes(vendor: str) -> list[tuple[str, str, str]]:
    return [*INDEXES, LIKE] if vendor == "postgresql" else INDEXES


def forwards(apps: Any, schema_editor: Any) -> None:
    for name, _, _ in _indexes(schema_editor.connection.vendor):
        schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')


def backwards(apps: Any, schema_editor: Any) -> None:
    for name, table, column in _indexes(schema_editor.connection.vendor):
        ops = " varchar_pattern_ops" if name.endswith("_like") else ""
        schema_editor.execute(f'CREATE INDEX IF NOT EXISTS "{name}" ON "{table}" ("{column}"{ops})')


class Migration(migrations.Migration):
    dependencies = [("memory", "0011_document_search_by_resource")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forwards, backwards)],
            state_operations=[
                migrations.AlterField(
                    model_name="auditentry",
                    name="project",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="audit_entries",
                        to="memory.project",
                    ),
                ),
                migrations.AlterField(
                    model_name="document",
                    name="resource",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="documents",
                        to="memory.resource",
                    ),
                ),
                migrations.AlterField(
                    model_name="documentversion",
                    name="document",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="versions",
                        to="memory.document",
                    ),
                ),
            ],
        )
    ]
