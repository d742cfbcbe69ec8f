"""A recall's store writes less on PostgreSQL (each recall inserts its row and a source
row per document it showed, then commits):

- no `varchar_pattern_ops` copies of the recall's and the sources' recall id indexes
  (Django adds one to every indexed text column for `LIKE 'prefix%'`, which no query
  of these tables makes): one index entry fewer for the recall and for each source;
- no foreign key check of a source's resource (the resource of a binding the recall
  just read; deletes cascade through the ORM): each check locked the resource's row
  at commit;
- the `memory` the model was shown (about 2 KB per bound document) compressed with
  lz4 where the server has it, rather than pglz: the same bytes in a fraction of the
  server's time (new rows only; old rows stay readable as they are).
"""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

from memoryadmin.core.compression import column_compression

# (table, column) of the indexes whose `_like` copy goes.
LIKE_INDEXES = (("agents_recall", "id"), ("agents_recallsource", "recall_id"))
# (table, column) compressed with lz4.
LZ4_COLUMNS = [("agents_recall", "memory")]


def forwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    for table, column in LIKE_INDEXES:
        name = schema_editor._create_index_name(table, [column], suffix="_like")
        schema_editor.execute(f"DROP INDEX IF EXISTS {quote(name)}")
    column_compression(LZ4_COLUMNS, "lz4")(apps, schema_editor)


def backwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    for table, column in LIKE_INDEXES:
        name = schema_editor._create_index_name(table, [column], suffix="_like")
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {quote(name)}"
            f" ON {quote(table)} ({quote(column)} varchar_pattern_ops)"
        )
    column_compression(LZ4_COLUMNS, "default")(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0010_operation_check_columns"),
        ("memory", "0011_document_search_by_resource"),
    ]

    operations = [
        migrations.AlterField(
            model_name="recallsource",
            name="resource",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="memory.resource",
            ),
        ),
        migrations.RunPython(forwards, backwards),
    ]
