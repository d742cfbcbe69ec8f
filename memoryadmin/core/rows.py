"""Model instances from rows of hand-written SQL, converted as the ORM converts its own.

Hot paths (the key look-up, a document read) build their SQL once per process
and convert rows with converters looked up once per connection: composing a
query with the ORM costs more than the round trip it makes.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Field, Model


@functools.cache
def _column(model: type[Model], name: str, vendor: str) -> str:
    field = _field(model, name)
    assert field.column is not None
    return connection.ops.quote_name(field.column)


def column(model: type[Model], name: str) -> str:
    """A field's column, quoted."""
    return _column(model, name, connection.vendor)


@functools.cache
def _columns(model: type[Model], alias: str, vendor: str) -> str:
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + column(model, f.name) for f in model._meta.concrete_fields)


def columns(model: type[Model], alias: str = "") -> str:
    """The model's concrete columns, quoted, in field order (optionally `alias.`-qualified)."""
    return _columns(model, alias, connection.vendor)


def table(model: type[Model]) -> str:
    """A model's table, quoted."""
    return connection.ops.quote_name(model._meta.db_table)


type Converter = Callable[[Any, Any, Any], Any]
# Per connection (converters may be bound to it), per model: each field's converters.
_converters: weakref.WeakKeyDictionary[Any, dict[type[Model], list[tuple[Any, list[Converter]]]]]
_converters = weakref.WeakKeyDictionary()


def _field_converters(model: type[Model]) -> list[tuple[Any, list[Converter]]]:
    wrapper = connections[DEFAULT_DB_ALIAS]
    by_model = _converters.setdefault(wrapper, {})
    found = by_model.get(model)
    if found is None:
        found = []
        for field in model._meta.concrete_fields:
            expression = field.get_col(model._meta.db_table)
            converters = [
                *wrapper.ops.get_db_converters(expression),
                *field.get_db_converters(wrapper),
            ]
            found.append((expression, converters))
        by_model[model] = found
    return found


def instance[M: Model](model: type[M], values: Sequence[Any]) -> M:
    """A model instance from its concrete columns' values, in `columns` order."""
    converted = []
    for (expression, converters), value in zip(_field_converters(model), values, strict=True):
        if value is not None:
            for converter in converters:
                value = converter(value, expression, connection)
        converted.append(value)
    # As a queryset builds its rows: every concrete field, in order, through __init__.
    return model.from_db(connection.alias, _attnames(model), converted)


def fetch_instance[M: Model](model: type[M], sql: str, params: Sequence[Any]) -> M | None:
    """The one row `sql` (selecting `columns(model)`) returns, as an instance; None
    when it returns none."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return None if row is None else instance(model, row)


@functools.cache
def _attnames(model: type[Model]) -> list[str]:
    return [f.attname for f in model._meta.concrete_fields]


def insert_sql(model: type[Model], names: Sequence[str], rows: int = 1) -> str:
    """`INSERT INTO <table> (<names' columns>) VALUES (%s, ...), ...` for `rows` rows."""
    targets = ", ".join(column(model, name) for name in names)
    one = "(" + ", ".join(["%s"] * len(names)) + ")"
    return f"INSERT INTO {table(model)} ({targets}) VALUES {', '.join([one] * rows)}"


def _field(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, Field)
    return field


def db_value(model: type[Model], name: str, value: Any) -> Any:
    """`value` of the named field as the database takes it (as `save` sends it)."""
    return _field(model, name).get_db_prep_save(value, connection)


def prepared(obj: Model, names: Sequence[str]) -> list[Any]:
    """`obj`'s values of the named fields as the database takes them (as `save` sends them)."""
    model = type(obj)
    return [db_value(model, name, getattr(obj, _field(model, name).attname)) for name in names]


def concrete_names(model: type[Model], *, auto: bool = True) -> list[str]:
    """The model's concrete field names; without `auto`, leaving out an auto primary key."""
    return [
        f.name
        for f in model._meta.concrete_fields
        if auto or not (f.primary_key and getattr(f, "db_returning", False))
    ]
