"""The tables every document write touches keep no index that another index of theirs
already gives (each one costs every write), and every foreign key still leads one (its
look-ups and cascades stay indexed)."""

from __future__ import annotations

import pytest
from django.db import connection, models

from memoryadmin.memory.models import AuditEntry, Document, DocumentVersion

pytestmark = pytest.mark.django_db

WRITTEN_BY_A_DOCUMENT_WRITE = [Document, DocumentVersion, AuditEntry]


def _indexes(model: type[models.Model]) -> dict[str, tuple[list[str], bool]]:
    """Each index (unique constraints too) but the primary key: its columns, and
    whether it is unique (a unique one is a rule, not only a way in)."""
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, model._meta.db_table)
    return {
        name: (list(c["columns"]), bool(c["unique"]))
        for name, c in found.items()
        if (c["index"] or c["unique"])
        and not c["primary_key"]
        and c["columns"]
        and all(c["columns"])  # not an expression index
    }


@pytest.mark.parametrize("model", WRITTEN_BY_A_DOCUMENT_WRITE, ids=lambda m: m.__name__)
def test_no_index_is_the_leading_part_of_another(model: type[models.Model]) -> None:
    indexes = _indexes(model)
    redundant = [
        (name, other)
        for name, (columns, unique) in indexes.items()
        for other, (longer, _) in indexes.items()
        if not unique and len(longer) > len(columns) and longer[: len(columns)] == columns
    ]
    assert redundant == []


@pytest.mark.parametrize("model", WRITTEN_BY_A_DOCUMENT_WRITE, ids=lambda m: m.__name__)
def test_every_foreign_key_leads_an_index(model: type[models.Model]) -> None:
    leading = {columns[0] for columns, _ in _indexes(model).values()}
    keys = [f.column for f in model._meta.concrete_fields if isinstance(f, models.ForeignKey)]
    assert keys
    assert [column for column in keys if column not in leading] == []
