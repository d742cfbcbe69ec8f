"""Model instances built from hand-written SQL rows are the ORM's own."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import post_init
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryadmin.agents.models import Session
from memoryadmin.core import rows
from memoryadmin.core.jsonbody import long_number
from memoryadmin.core.rows import columns, instance, table
from memoryadmin.memory.models import Document, Resource
from memoryadmin.memory.services.documents import document_create


def _row(document: Document) -> tuple[Any, ...]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns(Document)} FROM {table(Document)} WHERE id = %s", [document.pk]
        )
        row = cursor.fetchone()
    assert row is not None
    return tuple(row)


def _fields(document: Document) -> dict[str, Any]:
    return {f.attname: getattr(document, f.attname) for f in Document._meta.concrete_fields}


@pytest.mark.django_db
def test_an_instance_from_a_row_is_the_one_the_orm_reads(notes: Resource) -> None:
    created = document_create(resource=notes, doc_id="card", title="Card", text="x", actor="t")
    read = Document.objects.get(pk=created.pk)

    built = instance(Document, _row(created))

    assert type(built) is Document
    assert _fields(built) == _fields(read)
    assert {k: v for k, v in vars(built).items() if k != "_state"} == {
        k: v for k, v in vars(read).items() if k != "_state"
    }
    assert (built._state.adding, built._state.db) == (False, read._state.db)
    # A foreign key resolves, and the instance saves as an update, not an insert.
    assert built.resource == notes
    built.title = "Renamed"
    built.save(update_fields=["title"])
    assert Document.objects.get(pk=created.pk).title == "Renamed"
    assert Document.objects.count() == 1


@pytest.mark.django_db
def test_instance_initialisation_receivers_still_see_every_instance(notes: Resource) -> None:
    created = document_create(resource=notes, doc_id="card", title="Card", text="x", actor="t")
    seen: list[Document] = []

    def receiver(sender: type[Document], instance: Document, **kwargs: Any) -> None:
        seen.append(instance)

    post_init.connect(receiver, sender=Document)
    try:
        built = instance(Document, _row(created))
    finally:
        post_init.disconnect(receiver, sender=Document)

    assert seen == [built]
    assert built.title == "Card"


@pytest.mark.django_db
def test_an_instance_of_some_fields_is_the_one_only_reads(notes: Resource) -> None:
    created = document_create(resource=notes, doc_id="card", title="Card", text="x", actor="t")
    names = ["doc_id", "title", "revision"]
    read = Document.objects.only(*names).get(pk=created.pk)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {rows.columns_of(Document, ['id', *names])} FROM {table(Document)}"
            " WHERE id = %s",
            [created.pk],
        )
        row = cursor.fetchone()
    assert row is not None

    built = rows.instance_of(Document, ["id", *names], row)

    assert type(built) is Document
    assert built.get_deferred_fields() == read.get_deferred_fields()
    assert "text" in built.get_deferred_fields()
    assert {k: v for k, v in vars(built).items() if k != "_state"} == {
        k: v for k, v in vars(read).items() if k != "_state"
    }
    assert (built._state.adding, built._state.db) == (False, read._state.db)
    # A deferred field is read when used; the instance saves as an update.
    assert built.text == "x"
    built.title = "Renamed"
    built.save(update_fields=["title"])
    assert Document.objects.get(pk=created.pk).title == "Renamed"
    assert Document.objects.count() == 1


class _Watched(DeferredAttribute):
    """A field attribute that does something when set (as some fields' do)."""

    set_to: list[Any] = []

    def __set__(self, obj: Any, value: Any) -> None:
        self.set_to.append(value)
        obj.__dict__[self.field.attname] = value


@pytest.mark.django_db
def test_a_field_whose_attribute_does_more_when_set_is_set_through_it(
    notes: Resource, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = document_create(resource=notes, doc_id="card", title="Card", text="x", actor="t")
    monkeypatch.setattr(Document, "title", _Watched(Document._meta.get_field("title")))
    rows._plain.cache_clear()
    try:
        built = instance(Document, _row(created))
    finally:
        monkeypatch.undo()
        rows._plain.cache_clear()

    assert _Watched.set_to == ["Card"]
    assert built.title == "Card"
    assert rows._plain(Document)


@pytest.mark.django_db
def test_json_columns_read_as_the_orm_reads_them(session: Session) -> None:
    labels: dict[str, Any] = {
        "big": 123456789012345678901234567890,
        "edge": [2**63 - 1, -(2**63), 2**64, 0.1, -0.0, 1e308, 5e-324],
        "digits": "1234567890123456789012",
        "text": 'é😀 "quoted" \\ \u2028',
        "nested": [[[{"a": [None, True, False]}]]],
        "dup": {"k": 1},
    }
    Session.objects.filter(pk=session.pk).update(labels=labels)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns(Session)} FROM {table(Session)} WHERE id = %s", [session.pk]
        )
        row = cursor.fetchone()

    built = instance(Session, row)

    read = Session.objects.get(pk=session.pk)
    # The same values of the same types (PostgreSQL's jsonb writes some numbers back in
    # its own form: 1e308 as its 309 digits, an integer the standard library reads).
    assert repr(built.labels) == repr(read.labels)
    assert type(built.labels["big"]) is int
    if connection.vendor == "sqlite":
        assert repr(built.labels) == repr(labels)


@pytest.mark.django_db
def test_json_text_orjson_refuses_is_read_by_the_fields_own_converter() -> None:
    field = Session._meta.get_field("labels")
    convert = rows._json_loads(field)[0]
    nan = convert('{"x": NaN}', None, connection)
    assert nan["x"] != nan["x"]
    assert convert('"\\ud800"', None, connection) == "\ud800"
    assert convert("not json", None, connection) == "not json"
    assert convert('{"n": 99999999999999999999}', None, connection) == {"n": 99999999999999999999}


# Digits, other ASCII, a digit of another script (not [0-9]), other code points and a
# lone surrogate (stored by SQLite, refused by orjson).
_TEXT_PARTS = st.sampled_from(
    ["0", "7", "9", "1" * 18, "1" * 19, " ", "a", "\u0660", "é", "😀", "\ud800"]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_TEXT_PARTS, max_size=40).map("".join))
def test_a_long_number_is_found_as_the_pattern_finds_it(text: str) -> None:
    assert long_number(text) is (re.search("[0-9]{19}", text) is not None)


@pytest.mark.django_db
def test_a_compiled_statement_reads_what_its_queryset_reads(notes: Resource, project: Any) -> None:
    names = ("id", "doc_id", "title", "agent_writes", "revision")
    compiled = rows.Compiled(
        lambda resource_pk, doc_id: (
            Document.objects.live()
            .filter(resource_id=resource_pk, doc_id=doc_id)
            .values_list(*names)
        ),
        (int, str),
    )
    for doc_id in ("a", "b"):
        document_create(resource=notes, doc_id=doc_id, title=doc_id.upper(), actor="t")
    gone = document_create(resource=notes, doc_id="gone", title="G", actor="t")
    Document.objects.filter(pk=gone.pk).update(deleted=True)
    for doc_id in ("a", "b", "gone", "nothing"):
        row = compiled.row(notes.pk, doc_id)
        expected = Document.objects.live().filter(resource=notes, doc_id=doc_id)
        assert row == expected.values_list(*names).first(), doc_id
        if row is not None:
            assert rows.values_of(Document, names, row) == expected.values(*names).get()
    # One statement, composed once: its arguments are parameters, its constants (the live
    # condition) the queryset's own.
    statement = compiled.params(notes.pk, "a")
    assert statement is not None
    sql, params = statement
    assert compiled.params(notes.pk, "b") == (sql, ["b" if p == "a" else p for p in params])
    assert params.count(notes.pk) == 1
    assert "a" in params
    assert "compiled-argument" not in sql


@pytest.mark.django_db(transaction=True)
def test_a_compiled_lock_runs_only_in_a_transaction(session: Session) -> None:
    from django.db import transaction
    from django.db.transaction import TransactionManagementError

    locked = rows.Compiled(
        lambda pk: Session.objects.select_for_update().filter(pk=pk).values_list("id", "status"),
        (str,),
    )
    with transaction.atomic():
        assert locked.row(session.pk) == (session.pk, "active")
        statement = locked.params(session.pk)
        assert statement is not None
        sql = statement[0]
    if connection.features.has_select_for_update:
        assert "FOR UPDATE" in sql
        # Outside a transaction, as the ORM refuses it.
        with pytest.raises(TransactionManagementError):
            locked.row(session.pk)
        with pytest.raises(TransactionManagementError):
            Session.objects.select_for_update().filter(pk=session.pk).first()
    else:  # SQLite locks the database for a write, not rows: the ORM runs it anywhere.
        assert locked.row(session.pk) == (session.pk, "active")


def test_a_compiled_statement_takes_every_argument_it_is_given() -> None:
    unused = rows.Compiled(
        lambda pk, other: Session.objects.filter(pk=pk).values_list("id"), (str, str)
    )
    with pytest.raises(ValueError, match="not every argument"):
        unused.params("a", "b")
    with pytest.raises(TypeError):
        rows.Compiled(lambda pk: Session.objects.filter(pk=pk), (float,)).params(1.0)


@pytest.mark.django_db
def test_rows_inserted_in_one_statement_are_the_ones_the_orm_writes(
    session: Session, notes: Resource
) -> None:
    from django.db import IntegrityError, transaction
    from django.utils import timezone

    from memoryadmin.agents.models import Binding, SessionEvent

    now = timezone.now()
    copy = Session.objects.get(pk=session.pk)
    copy.pk, copy.idempotency_key, copy.labels = "ses_copy", "copy", {"a": [1, "é"]}
    rows.insert_rows([copy])
    assert (copy._state.adding, copy._state.db) == (False, "default")
    stored = Session.objects.get(pk="ses_copy")
    assert {f.attname: getattr(stored, f.attname) for f in Session._meta.concrete_fields} == {
        f.attname: getattr(copy, f.attname) for f in Session._meta.concrete_fields
    }
    # An auto primary key gets the database's value, each row its own, in order.
    events = [
        SessionEvent(session=copy, seq=seq, type="memory.saved", data={"n": seq}, created_at=now)
        for seq in (1, 2, 3)
    ]
    rows.insert_rows(events)
    assert [e.pk for e in events] == list(
        SessionEvent.objects.filter(session=copy).order_by("seq").values_list("pk", flat=True)
    )
    assert [e.data for e in SessionEvent.objects.filter(session=copy).order_by("seq")] == [
        {"n": 1},
        {"n": 2},
        {"n": 3},
    ]
    # A taken key is the ORM's IntegrityError, and its transaction writes nothing.
    twin = Binding(session=copy, resource=notes, scope="collection")
    with pytest.raises(IntegrityError), transaction.atomic():
        rows.insert_rows([Binding(session=copy, resource=notes, scope="collection"), twin])
    assert not Binding.objects.filter(session=copy).exists()


@pytest.mark.django_db
def test_rows_past_the_databases_parameters_are_inserted_in_batches(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from memoryadmin.agents.models import SessionEvent

    now = timezone.now()
    events = [
        SessionEvent(session=session, seq=100 + i, type="memory.saved", data={}, created_at=now)
        for i in range(5)
    ]
    # Two rows a statement, as bulk_create would batch them where parameters run out.
    monkeypatch.setattr(connection.ops, "bulk_batch_size", lambda fields, objs: 2)
    with CaptureQueriesContext(connection) as captured:
        rows.insert_rows(events)
    assert len(captured.captured_queries) == 3
    stored = SessionEvent.objects.filter(seq__gte=100).order_by("seq")
    assert [(e.pk, e.seq) for e in events] == [(e.pk, e.seq) for e in stored]
    assert len({e.pk for e in events}) == 5


@pytest.mark.django_db
def test_a_compiled_statement_takes_lists_as_field_in_does(
    notes: Resource, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled = rows.Compiled(
        lambda resource_pks, doc_ids: (
            Document.objects.live()
            .filter(resource_id__in=resource_pks, doc_id__in=doc_ids)
            .order_by("doc_id")
            .values_list("resource_id", "doc_id")
        ),
        (list[int], list[str]),
    )
    for doc_id in ("a", "b", "c"):
        document_create(resource=notes, doc_id=doc_id, title=doc_id, actor="t")

    def orm(resource_pks: Any, doc_ids: Any) -> list[tuple[Any, ...]]:
        rows_of = Document.objects.live().filter(resource_id__in=resource_pks, doc_id__in=doc_ids)
        return list(rows_of.order_by("doc_id").values_list("resource_id", "doc_id"))

    cases: list[tuple[Any, Any]] = [
        ([notes.pk], ["a"]),
        ([notes.pk], {"c", "a", "nothing"}),  # any iterable, in any order
        ([notes.pk, notes.pk + 1], ("b", "c", "b")),  # repeated values
        ([notes.pk], []),  # empty: nothing, without a round trip
        ([], ["a"]),
    ]
    for resource_pks, doc_ids in cases:
        assert compiled.rows(resource_pks, doc_ids) == orm(resource_pks, doc_ids), doc_ids
    assert compiled.params([notes.pk], []) is None
    # One statement kept per length of each list; past the longest kept, one for the call.
    sql = compiled.params([notes.pk], ["a", "b"])
    assert sql is not None
    assert sql[0] == compiled.params([notes.pk], ["x", "y"])[0]  # type: ignore[index]
    monkeypatch.setattr(rows, "_LIST_MAX", 2)
    kept = dict(compiled._by_shape)
    longer = ["a", "b", "c", "d"]
    assert compiled.rows([notes.pk], longer) == orm([notes.pk], longer)
    assert compiled._by_shape == kept
    # However callers vary their lists' lengths, a process keeps a bounded number.
    monkeypatch.setattr(rows, "_LIST_MAX", 1000)
    monkeypatch.setattr(rows, "_SHAPES_MAX", len(kept) + 1)
    assert compiled.rows([notes.pk] * 5, ["a"]) == orm([notes.pk], ["a"])
    assert compiled.rows([notes.pk] * 6, ["b", "a"]) == orm([notes.pk], ["a", "b"])
    assert len(compiled._by_shape) == len(kept) + 1
    assert (6, 2) not in compiled._by_shape


@pytest.mark.django_db
def test_a_compiled_statement_takes_aware_datetimes_as_the_orm_does(notes: Resource) -> None:
    from datetime import UTC, datetime, timedelta
    from datetime import timezone as zone

    names = ("doc_id", "updated_at")
    compiled = rows.Compiled(
        lambda resource_pk, since: (
            Document.objects.filter(resource_id=resource_pk, updated_at__gte=since)
            .exclude(updated_at=since, doc_id="b")
            .order_by("doc_id")
            .values_list(*names)
        ),
        (int, datetime),
    )
    for doc_id in ("a", "b", "c"):
        document_create(resource=notes, doc_id=doc_id, title=doc_id, actor="t")
    at = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
    for i, doc_id in enumerate(("a", "b", "c")):
        Document.objects.filter(doc_id=doc_id).update(updated_at=at + timedelta(microseconds=i))
    moments = [at, at + timedelta(microseconds=1), at + timedelta(hours=1), at - timedelta(days=1)]
    # Another zone's instant is the same instant.
    moments.append((at + timedelta(microseconds=1)).astimezone(zone(timedelta(hours=-7))))
    for since in moments:
        expected = (
            Document.objects.filter(resource=notes, updated_at__gte=since)
            .exclude(updated_at=since, doc_id="b")
            .order_by("doc_id")
        )
        read = compiled.rows(notes.pk, since)
        assert rows.values_rows(Document, names, read) == list(expected.values(*names)), since
        assert [rows.values_of(Document, names, row) for row in read] == list(
            expected.values(*names)
        )
    with pytest.raises(ValueError, match="aware"):
        compiled.rows(notes.pk, datetime(2026, 3, 4, 5, 6, 7))


@pytest.mark.django_db
def test_a_joined_row_is_the_instance_select_related_reads(session: Session) -> None:
    from django.test.utils import CaptureQueriesContext

    from memoryadmin.agents.models import Binding

    expected = Binding.objects.select_related("resource").filter(session=session).first()
    assert expected is not None
    # As the database driver gives the row (rows.Compiled), unconverted.
    row = rows.Compiled(
        lambda pk: Binding.objects.filter(pk=pk).values_list(
            *rows.joined_names(Binding, "resource")
        ),
        (int,),
    ).row(expected.pk)
    assert row is not None
    binding = rows.joined_instance(Binding, "resource", row)
    assert [getattr(binding, f.attname) for f in Binding._meta.concrete_fields] == [
        getattr(expected, f.attname) for f in Binding._meta.concrete_fields
    ]
    with CaptureQueriesContext(connection) as queries:
        resource = binding.resource
    assert queries.captured_queries == []  # read with it, as select_related reads it
    assert [getattr(resource, f.attname) for f in Resource._meta.concrete_fields] == [
        getattr(expected.resource, f.attname) for f in Resource._meta.concrete_fields
    ]
    # Some of the model's fields: the others deferred, as `.only()` leaves them.
    names = ("id", "scope", "target_id")
    row = rows.Compiled(
        lambda pk: Binding.objects.filter(pk=pk).values_list(
            *rows.joined_names(Binding, "resource", names)
        ),
        (int,),
    ).row(expected.pk)
    assert row is not None
    some = rows.joined_instance(Binding, "resource", row, names)
    assert some.get_deferred_fields() == {
        f.attname for f in Binding._meta.concrete_fields if f.name not in names
    }
    assert (some.pk, some.scope, some.target_id) == (
        expected.pk,
        expected.scope,
        expected.target_id,
    )
    assert some.resource.resource_id == expected.resource.resource_id


def _driver_cursor(cursor: Any) -> Any:
    """The driver's cursor inside Django's wrapper."""
    return cursor.cursor


@pytest.mark.django_db
def test_statements_share_the_cursor_their_driver_connection_keeps(notes: Resource) -> None:
    document_create(resource=notes, doc_id="a", title="A", text="x", actor="t")
    document_create(resource=notes, doc_id="b", title="B", text="yy", actor="t")
    sql = f"SELECT doc_id, bytes FROM {table(Document)} WHERE resource_id = %s ORDER BY doc_id"

    with rows.statement_cursor() as first:
        first.execute(sql, [notes.pk])
        read = first.fetchall()
        kept = _driver_cursor(first)
    with rows.statement_cursor() as second:
        second.execute(sql, [notes.pk])
        again = second.fetchall()
        assert _driver_cursor(second) is kept

    assert read == again == [("a", 1), ("b", 2)]
    assert rows.fetch_row(sql, [notes.pk]) == ("a", 1)
    assert rows.fetch_row(sql, [0]) is None
    # Wrapped as connection.cursor() wraps one, not the driver's cursor itself.
    assert type(first) is type(connection.cursor())


@pytest.mark.django_db
def test_each_statement_keeps_a_cursor_that_runs_its_first_text(notes: Resource) -> None:
    """Statements taking turns each keep their own cursor, and a statement composed
    again (an equal text, another string object) runs as the text its cursor ran first:
    the driver reads the same statement on the same cursor with what it looked up."""
    document_create(resource=notes, doc_id="a", title="A", text="x", actor="t")
    by_id = f"SELECT title FROM {table(Document)} WHERE doc_id = %s"
    count = f"SELECT count(*) FROM {table(Document)} WHERE resource_id = %s"

    def run(sql: str, params: list[Any]) -> tuple[str | None, Any, Any, Any]:
        composed = "".join(list(sql))  # an equal text, not the same object
        with (kept := rows.statement_cursor(composed)) as cursor:
            cursor.execute(kept.statement, params)
            # psycopg's adapters for the statement (how to send its parameters, how to
            # read its columns): kept while the cursor runs the same string object.
            looked_up = getattr(_driver_cursor(cursor), "_tx", None)
            return kept.statement, _driver_cursor(cursor), looked_up, cursor.fetchone()

    first = [run(by_id, ["a"]), run(count, [notes.pk])]
    again = [run(by_id, ["a"]), run(count, [notes.pk])]

    assert [row for *_, row in first] == [row for *_, row in again] == [("A",), (1,)]
    for (text, cursor, looked_up, _), (text_again, cursor_again, looked_up_again, _) in zip(
        first, again, strict=True
    ):
        assert text_again is text
        assert cursor_again is cursor
        assert looked_up_again is looked_up
    assert first[0][1] is not first[1][1]


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_kept_cursor_reads_times_as_the_orm_reads_them(notes: Resource) -> None:
    """Times read through a kept cursor are the ORM's: equal, aware, with the very zone
    object the ORM's have, read by psycopg's own loader (Django's, which sets the zone
    again on each, is left for the connection's other cursors)."""
    document_create(resource=notes, doc_id="a", title="A", text="x", actor="t")
    document_create(resource=notes, doc_id="b", title="B", text="yy", actor="t")
    names = ("created_at", "updated_at")
    sql = (
        f"SELECT {', '.join(rows.column(Document, n) for n in names)} FROM {table(Document)}"
        f" WHERE {rows.column(Document, 'resource')} = %s"
        f" ORDER BY {rows.column(Document, 'doc_id')}"
    )
    orm = [
        tuple(row)
        for row in Document.objects.filter(resource=notes).order_by("doc_id").values_list(*names)
    ]

    with (kept := rows.statement_cursor(sql)) as cursor:
        cursor.execute(kept.statement, [notes.pk])
        read = [tuple(row) for row in cursor.fetchall()]
        driver = _driver_cursor(cursor)

    assert read == orm
    assert len(read) == 2
    assert all(
        value.tzinfo is expected.tzinfo
        for row, orm_row in zip(read, orm, strict=True)
        for value, expected in zip(row, orm_row, strict=True)
    )
    from psycopg import adapters
    from psycopg.pq import Format

    oid = adapters.types["timestamptz"].oid
    psycopgs = adapters.get_loader(oid, Format.TEXT)
    assert driver.adapters.get_loader(oid, Format.TEXT) is psycopgs
    # The connection's other cursors keep Django's.
    with connection.cursor() as other:
        assert other.cursor.adapters.get_loader(oid, Format.TEXT) is not psycopgs


def _closed(cursor: Any) -> bool:
    closed = getattr(cursor, "closed", None)  # psycopg's
    if closed is not None:
        return bool(closed)
    try:  # sqlite3's
        cursor.execute("SELECT 1")
    except Exception:
        return True
    return False


@pytest.mark.django_db
def test_a_connection_keeps_the_cursors_of_a_bounded_number_of_statements(
    notes: Resource, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Statements composed per call (as many as their lists' lengths) only turn the
    oldest kept cursor over: it is closed, and its statement gets a new one."""
    monkeypatch.setattr(rows, "KEPT_STATEMENTS", 3)
    document_create(resource=notes, doc_id="a", title="A", text="x", actor="t")
    statements = [
        f"SELECT doc_id FROM {table(Document)} WHERE doc_id IN ({', '.join(['%s'] * n)})"
        for n in range(1, 6)
    ]
    cursors = []
    for n, sql in enumerate(statements, 1):
        with (kept := rows.statement_cursor(sql)) as cursor:
            cursor.execute(kept.statement, ["a"] * n)
            assert cursor.fetchall() == [("a",)]
            cursors.append(_driver_cursor(cursor))

    assert [_closed(cursor) for cursor in cursors] == [True, True, False, False, False]
    assert rows.fetch_row(statements[0], ["a"]) == ("a",)
    with (kept := rows.statement_cursor(statements[4])) as cursor:
        assert _driver_cursor(cursor) is cursors[4]  # still kept
    wrapper = rows.db_connection()
    raw = wrapper.connection
    kept_of = (raw.__dict__ if hasattr(raw, "__dict__") else wrapper.__dict__)[rows._KEPT]
    assert len(kept_of[1]) == 3


@pytest.mark.django_db
def test_a_statement_inside_another_gets_a_cursor_of_its_own(notes: Resource) -> None:
    """The outer statement's rows are still there after the inner one ran."""
    for doc_id in ("a", "b", "c"):
        document_create(resource=notes, doc_id=doc_id, title=doc_id, text="x", actor="t")
    sql = f"SELECT doc_id FROM {table(Document)} WHERE resource_id = %s ORDER BY doc_id"

    with rows.statement_cursor() as outer:
        outer.execute(sql, [notes.pk])
        assert outer.fetchone() == ("a",)
        inner = rows.fetch_row(f"SELECT title FROM {table(Document)} WHERE doc_id = %s", ["c"])
        with rows.statement_cursor() as nested:
            assert _driver_cursor(nested) is not _driver_cursor(outer)
        assert outer.fetchall() == [("b",), ("c",)]

    assert inner == ("c",)
    with rows.statement_cursor() as after:  # free again: the kept one
        assert _driver_cursor(after) is _driver_cursor(outer)


@pytest.mark.django_db
def test_the_kept_cursors_errors_are_djangos_and_leave_it_usable(notes: Resource) -> None:
    from django.db import IntegrityError, transaction

    document_create(resource=notes, doc_id="a", title="A", text="x", actor="t")
    duplicate = (
        f"INSERT INTO {table(Document)} (resource_id, doc_id, title, text, summary,"
        " agent_writes, revision, bytes, updated_at, writer_kind, writer_session_id,"
        " deleted, created_at) SELECT resource_id, doc_id, title, text, summary,"
        " agent_writes, revision, bytes, updated_at, writer_kind, writer_session_id,"
        f" deleted, created_at FROM {table(Document)} WHERE id = %s"
    )
    pk = Document.objects.get(doc_id="a").pk

    with pytest.raises(IntegrityError), transaction.atomic():
        rows.fetch_row(duplicate + " RETURNING id", [pk])

    assert rows.fetch_row(f"SELECT count(*) FROM {table(Document)}", []) == (1,)


@pytest.mark.django_db
def test_statements_are_counted_where_queries_are_logged(notes: Resource) -> None:
    from django.test.utils import CaptureQueriesContext

    sql = f"SELECT doc_id FROM {table(Document)} WHERE resource_id = %s"
    with CaptureQueriesContext(connection) as captured:
        rows.fetch_row(sql, [notes.pk])
        rows.fetch_row(sql, [notes.pk])

    assert [query["sql"] for query in captured.captured_queries] == [
        sql.replace("%s", str(notes.pk))
    ] * 2


@pytest.mark.django_db(transaction=True)
def test_each_thread_reads_through_its_own_connections_cursor(notes: Resource) -> None:
    """Threads at once, each statement on the cursor of the connection that thread
    holds: every thread reads its own document, a connection closed between reads (as
    at a request's end) or not."""
    from tests.helpers import run_threads

    for i in range(4):
        document_create(resource=notes, doc_id=f"d{i}", title=f"T{i}", text="x" * i, actor="t")
    sql = f"SELECT title, bytes FROM {table(Document)} WHERE resource_id = %s AND doc_id = %s"

    def work(i: int) -> list[Any]:
        read = []
        for round_ in range(30):
            read.append(rows.fetch_row(sql, [notes.pk, f"d{i}"]))
            if round_ % 3 == 0:
                connection.close()
        return read

    results = run_threads(4, work)

    assert results == [[(f"T{i}", i)] * 30 for i in range(4)]


@pytest.mark.django_db
def test_a_connection_passed_in_builds_what_a_connection_looked_up_builds(
    session: Session,
) -> None:
    """The row helpers take the connection from a caller that looked it up once for many
    rows (`wrapper=`): the same instances and values as without; and the connection looked
    up is each thread's own, the one Django's `connections` gives it."""
    from django.db import DEFAULT_DB_ALIAS, connections

    from memoryadmin.agents.models import Binding
    from tests.helpers import run_threads

    row = rows.Compiled(
        lambda pk: Binding.objects.filter(session=pk).values_list(
            *rows.joined_names(Binding, "resource")
        ),
        (str,),
    ).row(session.pk)
    assert row is not None
    wrapper = rows.db_connection()
    assert wrapper is connections[DEFAULT_DB_ALIAS]
    looked_up = rows.joined_instance(Binding, "resource", row)
    passed = rows.joined_instance(Binding, "resource", row, wrapper=wrapper)
    assert vars(passed).keys() == vars(looked_up).keys()
    for name in ("session_id", "resource_id", "scope", "target_id", "access"):
        assert getattr(passed, name) == getattr(looked_up, name)
    assert vars(passed.resource) | {"_state": None} == vars(looked_up.resource) | {"_state": None}
    assert passed._state.db == looked_up._state.db == DEFAULT_DB_ALIAS
    names = ("doc_id", "title", "bytes")
    values = ("card", "Card", 4)
    assert rows.values_of(Document, names, values, wrapper=wrapper) == rows.values_of(
        Document, names, values
    )
    assert rows.values_of(Document, names, values) == dict(zip(names, values, strict=True))

    def own(_: int) -> bool:
        return rows.db_connection() is connections[DEFAULT_DB_ALIAS] and (
            rows.db_connection() is not wrapper
        )

    assert run_threads(3, own) == [True, True, True]


@pytest.mark.django_db
def test_first_row_only_sends_the_one_side_of_a_join_once(notes: Resource) -> None:
    """A resource joined to its documents: the resource's columns on the first row (in
    the window's order), NULLs on the others; every row keeps its own columns."""
    for doc_id in ("c", "a", "b"):
        document_create(resource=notes, doc_id=doc_id, title=doc_id.upper(), text="x", actor="t")
    head = rows.first_row_only(columns(Resource, "r"))
    order = rows.first_row_window("d.doc_id, d.id")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {head}, d.doc_id, d.title FROM {table(Resource)} r"
            f" JOIN {table(Document)} d ON d.resource_id = r.id WHERE r.id = %s{order}",
            [notes.pk],
        )
        found = [tuple(row) for row in cursor.fetchall()]

    width = len(Resource._meta.concrete_fields)
    assert [row[width:] for row in found] == [("a", "A"), ("b", "B"), ("c", "C")]
    assert instance(Resource, found[0][:width]) == notes
    assert instance(Resource, found[0][:width]).resource_id == notes.resource_id
    assert all(value is None for row in found[1:] for value in row[:width])


@pytest.mark.django_db
def test_values_sent_as_they_are_are_what_django_would_send(notes: Resource) -> None:
    """`db_values` passes over Django's conversion only where it would return the value
    unchanged: for each field class it trusts, Django gives back an equal value of the
    same type; every document field converted both ways gives the same values."""
    from datetime import UTC, datetime, timedelta, timezone

    from django.db.models import CharField

    aware = datetime.now(timezone(timedelta(hours=5, minutes=30)))
    samples: dict[type, list[Any]] = {
        str: ["", "text", "ünï 🦜", "x" * 2000],
        bool: [True, False],
        datetime: [aware, aware.astimezone(UTC)],
    }
    trusted = {**rows._SENT_AS_IS, **rows._SENT_AS_IS_ON.get(connection.vendor, {})}
    assert trusted, "nothing passed over"
    for field_class, kind in trusted.items():
        field = field_class(max_length=4000) if field_class is CharField else field_class()
        for value in samples[kind]:
            sent = field.get_db_prep_save(value, connection)
            assert type(sent) is kind
            assert sent == value

    document = document_create(resource=notes, doc_id="a", title="A", text="ü" * 9, actor="t")
    names = rows.concrete_names(Document)
    fields = {field.name: field for field in Document._meta.concrete_fields}
    values = [getattr(document, fields[name].attname) for name in names]
    django_s = [
        fields[name].get_db_prep_save(value, connection)
        for name, value in zip(names, values, strict=True)
    ]
    assert rows.db_values(Document, names, values) == django_s
    # A time without its zone (and a value of another type) still goes through Django.
    naive = datetime(2026, 1, 2, 3, 4, 5)
    with pytest.warns(RuntimeWarning, match="naive datetime"):
        converted = rows.db_values(Document, ["updated_at", "bytes"], [naive, 7])
    with pytest.warns(RuntimeWarning, match="naive datetime"):
        expected = Document._meta.get_field("updated_at").get_db_prep_save(naive, connection)
    assert converted == [
        expected,
        Document._meta.get_field("bytes").get_db_prep_save(7, connection),
    ]
