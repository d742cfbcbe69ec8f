"""Model instances from rows of hand-written SQL, converted as the ORM converts its own.

Hot paths (the key look-up, a document read) build their SQL once per process
and convert rows with converters looked up once per connection: composing a
query with the ORM costs more than the round trip it makes. Each use of
`django.db.connection` looks the thread's connection up again, so these helpers
look it up once a call (and its vendor once a process: the engine is a setting).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import orjson
from django.core.exceptions import EmptyResultSet
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import (
    BooleanField,
    CharField,
    DateTimeField,
    Field,
    Func,
    JSONField,
    Model,
    QuerySet,
    TextField,
)
from django.db.models.base import ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import ModelSignal, post_init, pre_init
from django.db.transaction import TransactionManagementError

from memoryadmin.core.jsonbody import UNREAD, orjson_read


@functools.cache
def database_vendor() -> str:
    """The default database's vendor ("postgresql", "sqlite"), looked up once a process
    (the engine is a setting): `connection.vendor` looks the thread's connection up
    through asgiref's context-local storage on every use."""
    return connections[DEFAULT_DB_ALIAS].vendor


@functools.cache
def _column(model: type[Model], name: str, vendor: str) -> str:
    field = _field(model, name)
    assert field.column is not None
    return connection.ops.quote_name(field.column)


def column(model: type[Model], name: str) -> str:
    """A field's column, quoted."""
    return _column(model, name, database_vendor())


@functools.cache
def _columns(model: type[Model], alias: str, vendor: str) -> str:
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + column(model, f.name) for f in model._meta.concrete_fields)


def columns(model: type[Model], alias: str = "") -> str:
    """The model's concrete columns, quoted, in field order (optionally `alias.`-qualified)."""
    return _columns(model, alias, database_vendor())


@functools.cache
def _columns_of(model: type[Model], names: tuple[str, ...], alias: str, vendor: str) -> str:
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + column(model, name) for name in names)


# The window `first_row_only` names; a statement using it ends with `first_row_window`.
FIRST_ROW = "first_row"


def first_row_only(selected: str) -> str:
    """`selected` (a list of columns, as `columns` writes it) as NULLs on every row but
    the first of the statement's `first_row_window`: a join of one row to many (a
    session to its bindings) sends the one's values once, not once per row, and the
    reader converts them once (PostgreSQL and SQLite compute the row number once a row)."""
    first = f"row_number() OVER {FIRST_ROW} = 1"
    return ", ".join(f"CASE WHEN {first} THEN {name} END" for name in selected.split(", "))


def first_row_window(order: str) -> str:
    """The window clause of `first_row_only`, then `ORDER BY {order}`: the rows in the
    same order as the window numbers them, so the first row is the one numbered 1
    (`order` must order the rows totally)."""
    return f" WINDOW {FIRST_ROW} AS (ORDER BY {order}) ORDER BY {order}"


def columns_of(model: type[Model], names: Sequence[str], alias: str = "") -> str:
    """The named fields' columns, quoted, in `names` order (optionally `alias.`-qualified):
    a row of them becomes values with `values_of`."""
    return _columns_of(model, tuple(names), alias, database_vendor())


def table(model: type[Model]) -> str:
    """A model's table, quoted."""
    return connection.ops.quote_name(model._meta.db_table)


type Converter = Callable[[Any, Any, Any], Any]
# Per connection (converters may be bound to it), per model and fields (None: every
# concrete field): the fields that have converters (most have none), by position,
# with their column expression.
type Converters = list[tuple[int, Any, list[Converter]]]


def _field_converters(
    wrapper: Any, model: type[Model], names: tuple[str, ...] | None = None
) -> Converters:
    # Kept on the connection's wrapper (one per thread): a plain attribute, read faster
    # than a weak mapping keyed by it.
    by_model: dict[tuple[type[Model], tuple[str, ...] | None], Converters] | None
    by_model = wrapper.__dict__.get("_row_converters")
    if by_model is None:
        by_model = wrapper.__dict__.setdefault("_row_converters", {})
    found = by_model.get((model, names))
    if found is None:
        found = []
        fields = model._meta.concrete_fields if names is None else [_field(model, n) for n in names]
        for i, field in enumerate(fields):
            expression = field.get_col(model._meta.db_table)
            converters = [
                *wrapper.ops.get_db_converters(expression),
                *(_json_loads(field) if _plain_json(field) else field.get_db_converters(wrapper)),
            ]
            if converters:
                found.append((i, expression, converters))
        by_model[(model, names)] = found
    return found


def _plain_json(field: Field[Any, Any]) -> bool:
    """A JSON field read as Django's own reads it: no decoder, no converter of its own."""
    kind = type(field)
    return (
        isinstance(field, JSONField)
        and field.decoder is None
        and getattr(kind, "from_db_value", None) is JSONField.from_db_value
        and kind.get_db_converters is Field.get_db_converters
    )


def _json_loads(field: Field[Any, Any]) -> list[Converter]:
    """A JSON field's converter (`from_db_value`, the standard library's `json.loads`)
    reading its text with orjson, which is several times faster on the recall's documents
    and gives the same values (`core.jsonbody.orjson_read`); the field's own for what
    orjson refuses or would read differently (NaN, an unpaired surrogate, a long integer)
    and for what is not text."""
    fallback = cast(JSONField[Any], field).from_db_value

    def convert(value: Any, expression: Any, wrapper: Any) -> Any:
        if type(value) is str:
            data = orjson_read(value)
            if data is not UNREAD:
                return data
        return fallback(value, expression, wrapper)

    return [convert]


def _converted(wrapper: Any, converters: Converters, values: Sequence[Any]) -> Sequence[Any]:
    if not converters:
        return values
    converted = list(values)
    for i, expression, field_converters in converters:
        value = converted[i]
        if value is not None:
            for converter in field_converters:
                value = converter(value, expression, wrapper)
            converted[i] = value
    return converted


@functools.cache
def _plain(model: type[Model]) -> bool:
    """Whether `Model.__init__` would do no more for a row of every concrete field than
    put each value in the instance's `__dict__`: the model keeps Django's `__init__` and
    `from_db`, and no field's attribute is a descriptor that does more when set than
    Django's own (a plain field's `DeferredAttribute` sets nothing; a foreign key's
    column attribute only drops a cached related object, which a new instance has not).
    (Whether a signal listens to the model's `pre_init` or `post_init` is asked on each
    call: receivers may connect at any time.)"""
    from_db: Any = model.from_db
    if model.__init__ is not Model.__init__ or from_db.__func__ is not _MODEL_FROM_DB:
        return False
    plain = (DeferredAttribute, ForeignKeyDeferredAttribute)
    return all(
        type(_class_attribute(model, f.attname)) in plain for f in model._meta.concrete_fields
    )


_MODEL_FROM_DB: Any = Model.__dict__["from_db"].__func__


def _class_attribute(model: type[Model], name: str) -> Any:
    """The attribute `name` as the class holds it (a descriptor is not called)."""
    for base in model.__mro__:
        if name in base.__dict__:
            return base.__dict__[name]
    return None


def _listened(signal: ModelSignal, model: type[Model]) -> bool:
    # No receiver at all (as in this project): no need to ask which the model has.
    return bool(signal.receivers) and signal.has_listeners(model)


def db_connection() -> Any:
    """The default database's connection (Django's wrapper, not the `connection`
    proxy). Each look-up goes through asgiref's context-local storage: a caller that
    builds the instances or values of many rows looks it up once and passes it to each
    (`wrapper=`)."""
    return connections[DEFAULT_DB_ALIAS]


def _connection(wrapper: Any) -> Any:
    return db_connection() if wrapper is None else wrapper


def instance[M: Model](model: type[M], values: Sequence[Any], *, wrapper: Any = None) -> M:
    """A model instance from its concrete columns' values, in `columns` order
    (`wrapper`: the default database's connection, when the caller has it)."""
    wrapper = _connection(wrapper)
    names = _attnames(model)
    if len(values) != len(names):
        raise ValueError(f"{model.__name__}: {len(values)} values for {len(names)} fields")
    converted = _converted(wrapper, _field_converters(wrapper, model), values)
    return _from_db(model, wrapper.alias, names, converted)


def _from_db[M: Model](
    model: type[M], alias: str, attnames: list[str], converted: Sequence[Any]
) -> M:
    """`model.from_db(alias, attnames, converted)`, as a queryset builds its rows:
    `attnames` (in the model's field order) get their values, the other fields are
    deferred. For a plain model, without `__init__`'s pass through each field's
    descriptor (a third of the time): a deferred field is one missing from the
    instance's `__dict__`, as `__init__` leaves it."""
    if _plain(model) and not (_listened(pre_init, model) or _listened(post_init, model)):
        obj = model.__new__(model)
        obj._state = state = ModelState()
        state.adding = False
        state.db = alias
        obj.__dict__.update(zip(attnames, converted, strict=True))
        return obj
    return model.from_db(alias, attnames, converted)


@functools.cache
def _field_order(model: type[Model], names: tuple[str, ...]) -> list[str]:
    attnames = [_field(model, name).attname for name in names]
    order = [f.attname for f in model._meta.concrete_fields if f.attname in attnames]
    if attnames != order:
        raise ValueError(f"{model.__name__}: {names} are not in the model's field order")
    return attnames


def instance_of[M: Model](
    model: type[M], names: Sequence[str], values: Sequence[Any], *, wrapper: Any = None
) -> M:
    """A model instance from the named fields' values (a row of `columns_of(model, names)`,
    `names` in the model's field order); the other fields are deferred, as `.only(*names)`
    leaves them: read from the database if ever used."""
    wrapper = _connection(wrapper)
    attnames = _field_order(model, tuple(names))
    converted = _converted(wrapper, _field_converters(wrapper, model, tuple(names)), values)
    return _from_db(model, wrapper.alias, attnames, converted)


def values_of(
    model: type[Model], names: Sequence[str], values: Sequence[Any], *, wrapper: Any = None
) -> dict[str, Any]:
    """The named fields' values by name from a row of `columns_of(model, names)`,
    converted as `.values(*names)` converts them: no model instance, where none is needed."""
    return values_rows(model, names, [values], wrapper=wrapper)[0]


def values_rows(
    model: type[Model], names: Sequence[str], rows: Iterable[Sequence[Any]], *, wrapper: Any = None
) -> list[dict[str, Any]]:
    """`values_of` of each of `rows`, the connection and its converters looked up once
    (a page of rows); where none of the fields has a converter, each row as it is."""
    wrapper = _connection(wrapper)
    names = tuple(names)
    converters = _field_converters(wrapper, model, names)
    if not converters:
        return [dict(zip(names, row, strict=True)) for row in rows]
    return [dict(zip(names, _converted(wrapper, converters, row), strict=True)) for row in rows]


def related_set(obj: Model, name: str, value: Model) -> None:
    """Gives `obj` its related object of the foreign key `name`, as `select_related`
    gives it a joined row's: into the field's cache, the key's column already read with
    `obj` (assigning through the descriptor would check and set it again)."""
    _many_to_one(type(obj), name).set_cached_value(obj, value)


@functools.cache
def _many_to_one(model: type[Model], name: str) -> Any:
    field = _field(model, name)
    assert field.many_to_one, name
    return field


@functools.cache
def _joined(
    model: type[Model], related: str, names: tuple[str, ...] | None
) -> tuple[tuple[str, ...], type[Model], list[str]]:
    own = tuple(concrete_names(model)) if names is None else names
    other = _field(model, related).related_model
    assert isinstance(other, type), related
    assert issubclass(other, Model), related
    return own, other, [*own, *(f"{related}__{name}" for name in concrete_names(other))]


def joined_names(model: type[Model], related: str, names: Sequence[str] | None = None) -> list[str]:
    """What a `values_list` of `model` reads for `joined_instance`: its fields `names`
    (every concrete field by default, in field order), then every concrete field of the
    row its foreign key `related` names (`related__<field>`)."""
    return list(_joined(model, related, None if names is None else tuple(names))[2])


def joined_instance[M: Model](
    model: type[M],
    related: str,
    row: Sequence[Any],
    names: Sequence[str] | None = None,
    *,
    wrapper: Any = None,
) -> M:
    """The instance of a row of `joined_names(model, related, names)` (or of the same
    columns written by hand), with its `related` object built from the rest of the row,
    as `select_related` gives it."""
    own, other, _ = _joined(model, related, None if names is None else tuple(names))
    split, wrapper = len(own), _connection(wrapper)
    obj = (
        instance(model, row[:split], wrapper=wrapper)
        if names is None
        else instance_of(model, own, row[:split], wrapper=wrapper)
    )
    related_set(obj, related, instance(other, row[split:], wrapper=wrapper))
    return obj


class _Kept:
    """A database cursor a driver connection keeps for `statement_cursor`, the statement
    it runs (the first string object of that text it met), and whether a statement is
    using it now."""

    __slots__ = ("busy", "cursor", "sql")

    def __init__(self, cursor: Any, sql: str | None) -> None:
        self.cursor, self.sql, self.busy = cursor, sql, False


# The kept cursors of a driver connection are on it, with the connection; where the
# driver's connection takes no attribute (sqlite3's, never pooled: one a thread while it
# lasts), on the thread's connection.
_KEPT = "_memoryadmin_kept"
# How many statements' cursors a driver connection keeps (the oldest goes first): the hot
# statements are a handful; statements composed per call (a list of n values) only turn
# the oldest over.
KEPT_STATEMENTS = 32
_NO_KEY = object()


def _kept(wrapper: Any, sql: str | None) -> _Kept:
    """The cursor the thread's driver connection keeps for `sql` (None: for statements
    that share one), opened on its first use."""
    raw = wrapper.connection
    holder = raw.__dict__ if hasattr(raw, "__dict__") else wrapper.__dict__
    pair: tuple[Any, dict[str | None, _Kept]] | None = holder.get(_KEPT)
    if pair is None or pair[0] is not raw:
        pair = (raw, {})
        holder[_KEPT] = pair
    kept = pair[1].get(sql)
    if kept is None:
        kept = _keep(wrapper, pair[1], sql)
    return kept


def _keep(wrapper: Any, kept: dict[str | None, _Kept], sql: str | None) -> _Kept:
    with wrapper.wrap_database_errors:
        while len(kept) >= KEPT_STATEMENTS:
            oldest = next((key for key, old in kept.items() if not old.busy), _NO_KEY)
            if oldest is _NO_KEY:  # every one in use (statements nested that deep)
                break
            kept.pop(cast(str | None, oldest)).cursor.close()
        new = kept[sql] = _Kept(_times_read_by_driver(wrapper, wrapper.create_cursor()), sql)
    return new


@functools.cache
def _driver_timestamptz() -> tuple[int, Any]:
    """psycopg's own loader of `timestamptz` text (its C one where psycopg has it), and
    the type's oid."""
    from psycopg import adapters
    from psycopg.pq import Format

    oid = adapters.types["timestamptz"].oid
    return oid, adapters.get_loader(oid, Format.TEXT)


def _times_read_by_driver(wrapper: Any, cursor: Any) -> Any:
    """`cursor`, reading `timestamptz` values with psycopg's own loader where it gives
    what Django's gives. Django registers a loader on every PostgreSQL connection that
    calls psycopg's and replaces the result's zone with the connection's (`timezone`):
    a call of Python for each time read (0.9 us; a list's page of 50 rows reads one a
    row). Where Django's zone is UTC and the session's `TimeZone` is UTC (Django sets it so
    on connecting), psycopg's own loader returns the same times with the same `UTC` object
    as their zone."""
    if (
        wrapper.vendor == "postgresql"
        and wrapper.timezone is UTC
        and wrapper.connection.info.parameter_status("TimeZone") == "UTC"
    ):
        oid, loader = _driver_timestamptz()
        cursor.adapters.register_loader(oid, loader)
    return cursor


class statement_cursor:
    """`connection.cursor()` for one statement at a time, on a database cursor that the
    driver connection keeps for that statement (a pooled connection keeps its own for
    whichever request holds it); run `statement`, the text as the kept cursor last ran it.

    A driver cursor looks up how to read each column type of a result, and how to send
    each parameter's type, the first time it meets them (psycopg: per cursor, and again
    whenever the statement is not the string object the cursor ran last), and Django opens
    a new one for every statement. A cursor kept for each statement (`sql`; statements
    without one share a cursor) runs the same string object each time and looks nothing
    up again. The kept cursor is wrapped as `connection.cursor()` wraps one (its errors
    are Django's, after the same health check and thread check); a fresh cursor is used
    where queries are logged (`DEBUG`, tests counting them: Django's debug wrapper records
    them) and for a statement run while another one uses the kept cursor, whose rows it
    would replace. A class, not a generator: it runs on every hot statement."""

    __slots__ = ("fresh", "kept", "statement")

    def __init__(self, sql: str | None = None) -> None:
        self.statement = sql

    def __enter__(self) -> Any:
        wrapper = connections[DEFAULT_DB_ALIAS]
        self.kept: _Kept | None = None
        self.fresh: Any = None
        if not wrapper.queries_logged:
            wrapper.close_if_health_check_failed()
            wrapper.ensure_connection()
            kept = _kept(wrapper, self.statement)
            if not kept.busy:
                wrapper.validate_thread_sharing()
                kept.busy = True
                self.kept = kept
                if kept.sql is not None:
                    self.statement = kept.sql
                return wrapper.make_cursor(kept.cursor)
        self.fresh = wrapper.cursor()
        return self.fresh.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self.kept is not None:
            self.kept.busy = False
        else:
            self.fresh.__exit__(*exc)


def fetch_row(sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
    """The first row `sql` returns, as the database driver gives it; None when none."""
    with (kept := statement_cursor(sql)) as cursor:
        cursor.execute(kept.statement, params)
        row: tuple[Any, ...] | None = cursor.fetchone()
    return row


def fetch_rows(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Every row `sql` returns, as the database driver gives them."""
    with (kept := statement_cursor(sql)) as cursor:
        cursor.execute(kept.statement, params)
        return list(cursor.fetchall())


def fetch_instance[M: Model](model: type[M], sql: str, params: Sequence[Any]) -> M | None:
    """The one row `sql` (selecting `columns(model)`) returns, as an instance; None
    when it returns none."""
    row = fetch_row(sql, params)
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
    """`value` of the named field as the database takes it (as `save` sends it; JSON
    encoded once, by `json_text`)."""
    return _stored(_field(model, name), None, value, connections[DEFAULT_DB_ALIAS])


@functools.cache
def _fields(model: type[Model], names: tuple[str, ...]) -> tuple[Field[Any, Any], ...]:
    return tuple(_field(model, name) for name in names)


def db_values(model: type[Model], names: Sequence[str], values: Iterable[Any]) -> list[Any]:
    """The named fields' `values` as the database takes them (as `db_value` gives each):
    a value that Django's conversion would return unchanged (`_sent_as_is`) as it is."""
    wrapper = connections[DEFAULT_DB_ALIAS]
    names = tuple(names)
    fields = _fields(model, names)
    kinds = _sent_as_is(model, names, database_vendor())
    return [
        _stored(field, kind, value, wrapper)
        for field, kind, value in zip(fields, kinds, values, strict=True)
    ]


# Django's own field classes (not subclasses, which may convert more) whose conversion for
# the database returns a value of one type unchanged (`tests/test_rows.py` holds Django to
# it): text as text, a bool as a bool, and on PostgreSQL a time with its zone as it is
# (elsewhere Django converts it; psycopg adapts Django's integers to typed parameters).
_SENT_AS_IS: dict[type[Field[Any, Any]], type] = {
    CharField: str,
    TextField: str,
    BooleanField: bool,
}
_SENT_AS_IS_ON: dict[str, dict[type[Field[Any, Any]], type]] = {
    "postgresql": {DateTimeField: datetime},
}


def _unchanged(kind: type | None, value: Any) -> bool:
    """Whether Django would send `value` as it is (`kind`: its field's `_sent_as_is`)."""
    if type(value) is not kind:
        return False
    return kind is not datetime or cast(datetime, value).tzinfo is not None


@functools.cache
def _sent_as_is(model: type[Model], names: tuple[str, ...], vendor: str) -> tuple[type | None, ...]:
    """For each named field, the type whose values Django sends to the database unchanged
    (a `datetime` only with its time zone), or None."""
    kinds = {**_SENT_AS_IS, **_SENT_AS_IS_ON.get(vendor, {})}
    return tuple(kinds.get(type(field)) for field in _fields(model, names))


def json_text(value: Any) -> bytes:
    """`value` as JSON text: orjson's (compact, UTF-8), or json.dumps's in the same form
    for what orjson refuses (an integer past 64 bits, a key that is not a string)."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _as_is(encoded: bytes) -> bytes:
    return encoded


def json_db_value(value: Any) -> Any:
    """A JSON field's value as the database takes it, encoded once by `json_text` (Django
    encodes with json.dumps): on PostgreSQL a jsonb parameter of those bytes, elsewhere
    their text. None stays SQL NULL, as `save` sends it."""
    if value is None:
        return None
    encoded = json_text(value)
    if database_vendor() == "postgresql":
        from psycopg.types.json import Jsonb

        return Jsonb(encoded, dumps=_as_is)
    return encoded.decode()


def prepared(obj: Model, names: Sequence[str]) -> list[Any]:
    """`obj`'s values of the named fields as the database takes them (as `save` sends
    them; JSON fields encoded by `json_text`)."""
    model, wrapper, names = type(obj), connections[DEFAULT_DB_ALIAS], tuple(names)
    kinds = _sent_as_is(model, names, database_vendor())
    return [
        _stored(field, kind, getattr(obj, field.attname), wrapper)
        for field, kind in zip(_fields(model, names), kinds, strict=True)
    ]


def _stored(field: Field[Any, Any], kind: type | None, value: Any, wrapper: Any) -> Any:
    """A field's value as the database takes it, as `save` sends it (JSON encoded once,
    by `json_text`; `kind`: the field's `_sent_as_is`)."""
    if _unchanged(kind, value):
        return value
    return (
        json_db_value(value)
        if isinstance(field, JSONField)
        else field.get_db_prep_save(value, wrapper)
    )


def insert_rows(objs: Sequence[Model]) -> None:
    """Writes new instances of one model in one `INSERT` (or, past the database's number
    of parameters, in as many as `bulk_create` would), their values as `bulk_create`
    sends them (each field's `pre_save`, then its value as the database takes it; JSON
    encoded by `json_text`), gives an auto primary key the value the database chose, and
    marks them saved. As `bulk_create`, it sends no model signal; it composes no ORM query."""
    if not objs:
        return
    model = type(objs[0])
    assert all(type(obj) is model for obj in objs), "one model at a time"
    wrapper = connections[DEFAULT_DB_ALIAS]
    fields = _insert_fields(model)
    names = tuple(f.name for f in fields)
    kinds = _sent_as_is(model, names, database_vendor())
    auto = model._meta.pk if model._meta.pk not in fields else None
    batch = max(1, wrapper.ops.bulk_batch_size(list(fields), objs))
    for start in range(0, len(objs), batch):
        part = objs[start : start + batch]
        params = [
            _stored(field, kind, field.pre_save(obj, True), wrapper)
            for obj in part
            for field, kind in zip(fields, kinds, strict=True)
        ]
        sql = insert_sql(model, names, len(part))
        if auto is not None:
            sql = f"{sql} RETURNING {column(model, auto.name)}"
        with (kept := statement_cursor(sql)) as cursor:
            cursor.execute(kept.statement, params)
            if auto is not None:
                for obj, (pk,) in zip(part, cursor.fetchall(), strict=True):
                    obj.pk = pk
    for obj in objs:
        inserted(obj)


@functools.cache
def _insert_fields(model: type[Model]) -> tuple[Field[Any, Any], ...]:
    return tuple(_field(model, name) for name in concrete_names(model, auto=False))


def inserted(obj: Model) -> None:
    """Marks `obj`, written by a statement of `insert_sql`'s (not by `save`), as saved in
    the default database, as `save` would have."""
    obj._state.adding = False
    obj._state.db = DEFAULT_DB_ALIAS


# What a compiled statement is composed with in place of its arguments: values no caller
# passes, which the ORM passes through to the statement's parameters unchanged.
_PLACEHOLDER_STR = "\x00compiled-argument-{}-{}\x00"
_PLACEHOLDER_INT = 2_000_000_000
_PLACEHOLDER_TIME = datetime(1001, 2, 3, 4, 5, 6, tzinfo=UTC)
# A list argument's elements at the most for a kept statement (one per length); a longer
# list's statement is composed for its call.
_LIST_MAX = 1000
# Statements kept at the most by one Compiled (one per combination of its lists' lengths,
# which callers choose): past it, a new combination is composed for its call, so that
# no caller can make a process keep more.
_SHAPES_MAX = 256

type _Slot = tuple[int | None, int | None, Any]  # argument, element of a list, constant
type _Statement = tuple[str, list[_Slot], bool] | None  # None: the ORM's empty result


class Compiled:
    """A queryset's statement, composed by the ORM once per process (once per length of
    each list argument) and run again with other arguments: for a hot statement whose
    composition costs more than its round trip, with no second copy of its conditions or
    columns.

    `build(*args)` returns the queryset for `args` (a `values_list` of the fields to
    read); it is called with placeholders of the types `kinds` names (`str`, `int`, an
    aware `datetime`, or a list of `str` or `int`, as `field__in` takes), and each of the
    statement's parameters that is a placeholder takes the matching argument of every
    call (an element of a list; a datetime as the database takes a date-time field's
    value); the others are the queryset's own constants. An empty list reads nothing, as
    the ORM's `__in` does. A statement that locks rows runs only inside a transaction, as
    the ORM's own does (where the database locks rows)."""

    def __init__(self, build: Callable[..., QuerySet[Any, Any]], kinds: Sequence[Any]) -> None:
        if any(kind not in (str, int, datetime, list[str], list[int]) for kind in kinds):
            raise TypeError(
                f"compiled arguments are str, int, datetime or lists of str or int, not {kinds}"
            )
        self._build, self._kinds = build, tuple(kinds)
        self._scalar = [kind in (str, int, datetime) for kind in kinds]
        self._times = [i for i, kind in enumerate(kinds) if kind is datetime]
        self._by_shape: dict[tuple[int | None, ...], _Statement] = {}

    def _placeholder(self, kind: Any, i: int, j: int) -> Any:
        if kind is datetime:
            return _PLACEHOLDER_TIME + timedelta(microseconds=i * _LIST_MAX + j)
        return (
            _PLACEHOLDER_STR.format(i, j)
            if kind in (str, list[str])
            else (_PLACEHOLDER_INT + i * _LIST_MAX + j)
        )

    def _compile(self, shape: tuple[int | None, ...]) -> _Statement:
        placeholders: list[Any] = []
        where: dict[Any, tuple[int, int | None]] = {}
        adapt = connections[DEFAULT_DB_ALIAS].ops.adapt_datetimefield_value
        for i, (kind, length) in enumerate(zip(self._kinds, shape, strict=True)):
            if length is None:
                placeholders.append(self._placeholder(kind, i, 0))
                # A date-time reaches the statement as the database takes it.
                where[adapt(placeholders[-1]) if kind is datetime else placeholders[-1]] = (i, None)
            else:
                items = [self._placeholder(kind, i, j) for j in range(length)]
                placeholders.append(items)
                where.update({item: (i, j) for j, item in enumerate(items)})
        query = self._build(*placeholders).query
        try:
            sql, params = query.get_compiler(DEFAULT_DB_ALIAS).as_sql()
        except EmptyResultSet:
            return None
        slots: list[_Slot] = []
        for param in params:
            found = where.get(param) if isinstance(param, (str, int, datetime)) else None
            slots.append((None, None, param) if found is None else (*found, None))
        if len({(i, j) for i, j, _ in slots if i is not None}) != len(where):
            raise ValueError(f"not every argument reaches the statement: {sql}")
        features = connections[DEFAULT_DB_ALIAS].features
        locks = bool(query.select_for_update) and features.has_select_for_update
        return sql, slots, locks and features.supports_transactions

    def params(self, *args: Any) -> tuple[str, list[Any]] | None:
        """The statement and its parameters for `args`; None where it reads nothing."""
        scalar = self._scalar
        args = tuple(arg if one else list(arg) for one, arg in zip(scalar, args, strict=True))
        shape = tuple(None if one else len(arg) for one, arg in zip(scalar, args, strict=True))
        if shape in self._by_shape:
            compiled = self._by_shape[shape]
        else:
            if len(self._by_shape) >= _SHAPES_MAX or any(
                length is not None and length > _LIST_MAX for length in shape
            ):
                # Rare shapes (a long list, or past the statements kept): composed for
                # the call, not kept.
                try:
                    return self._build(*args).query.get_compiler(DEFAULT_DB_ALIAS).as_sql()
                except EmptyResultSet:
                    return None
            compiled = self._by_shape[shape] = self._compile(shape)
        if compiled is None:
            return None
        sql, slots, locks = compiled
        if locks and connections[DEFAULT_DB_ALIAS].get_autocommit():
            raise TransactionManagementError(
                "select_for_update cannot be used outside of a transaction."
            )
        if self._times:
            if any(args[i].tzinfo is None for i in self._times):
                raise ValueError("a compiled statement takes aware datetimes")
            adapt = connections[DEFAULT_DB_ALIAS].ops.adapt_datetimefield_value
            args = tuple(adapt(arg) if i in self._times else arg for i, arg in enumerate(args))
        return sql, [
            constant if i is None else args[i] if j is None else args[i][j]
            for i, j, constant in slots
        ]

    def row(self, *args: Any) -> tuple[Any, ...] | None:
        """The first row the statement returns for `args`; None when none."""
        statement = self.params(*args)
        return None if statement is None else fetch_row(*statement)

    def rows(self, *args: Any) -> list[tuple[Any, ...]]:
        """Every row the statement returns for `args`."""
        statement = self.params(*args)
        return [] if statement is None else fetch_rows(*statement)


def concrete_names(model: type[Model], *, auto: bool = True) -> list[str]:
    """The model's concrete field names; without `auto`, leaving out an auto primary key."""
    return [
        f.name
        for f in model._meta.concrete_fields
        if auto or not (f.primary_key and getattr(f, "db_returning", False))
    ]


class NotBlank(Func):
    """`column <> ''` with the empty string written in the statement, not sent as a
    parameter: a filter beside a look-up through a partial index that leaves blank values
    out (`condition=~Q(field="")`).

    The planner uses such an index only where it can prove the query's rows meet its
    condition. `field = %s` proves it for the value a plan is made for, but a prepared
    statement (`prepare_threshold`) soon gets one plan for any value (its generic plan),
    and a correlated `field = OuterRef(...)` never proves it: the plan then falls back on
    another index or reads the whole table (a runner's claim read every job ever run).
    """

    arity = 1
    template = "%(expressions)s <> ''"
    output_field = BooleanField()
