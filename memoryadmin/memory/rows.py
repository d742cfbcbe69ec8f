"""Model instances from rows of hand-written SQL, converted as the ORM converts its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import Field, Model


def column(model: type[Model], name: str) -> str:
    """A field's column, quoted."""
    field = model._meta.get_field(name)
    assert isinstance(field, Field)
    assert field.column is not None
    return connection.ops.quote_name(field.column)


def columns(model: type[Model], alias: str = "") -> str:
    """The model's concrete columns, quoted, in field order (optionally `alias.`-qualified)."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + column(model, f.name) for f in model._meta.concrete_fields)


def instance[M: Model](model: type[M], values: Sequence[Any]) -> M:
    """A model instance from its concrete columns' values, in `columns` order."""
    fields = model._meta.concrete_fields
    converted = []
    for field, value in zip(fields, values, strict=True):
        if value is not None:
            expression = field.get_col(model._meta.db_table)
            converters = connection.ops.get_db_converters(expression)
            for converter in [*converters, *field.get_db_converters(connection)]:
                value = converter(value, expression, connection)
        converted.append(value)
    return model.from_db(connection.alias, [f.attname for f in fields], converted)
