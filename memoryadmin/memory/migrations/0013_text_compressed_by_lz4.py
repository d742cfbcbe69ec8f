"""On PostgreSQL, a document's and a version's text are compressed with lz4, not pglz.

A text longer than about 2 KB is compressed as its row is written (TOAST), and pglz
spends about 200 us more than lz4 on 16 KB of prose (an INSERT of it, psycopg, one
connection: 545 to 581 us against 332 to 350); every write of a long document compresses
its text twice, in the document's row and in its new version. lz4 keeps such text about
1.9 times as large as pglz does, and reads it as fast. Only values written from now on
are compressed this way; what is stored stays as it is. Where the server was built
without lz4, nothing changes.
"""

from __future__ import annotations

from django.db import migrations

from memoryadmin.core.compression import column_compression

# (table, column)
COLUMNS = [("memory_document", "text"), ("memory_documentversion", "text")]


class Migration(migrations.Migration):
    dependencies = [("memory", "0012_redundant_fk_indexes")]

    operations = [
        migrations.RunPython(
            column_compression(COLUMNS, "lz4"), column_compression(COLUMNS, "default")
        )
    ]
