"""What every app's erase function shares: finding a text in its columns and replacing it.

An erasure (memoryadmin/erasures) removes an exact text from every place the
database keeps it. Each app erases its own tables; the rules they share are
here: the forms a text takes inside a stored JSON document (where quotes,
backslashes and, on SQLite, every non-ASCII character are escaped), the
filter that finds candidate rows in one query per table, the replacement
inside a JSON value (keys too), counted, and the pass over one table's rows
that uses them all (`rows_erase`).

It is also where the apps' copies of memory text are registered (`copies_register`,
from each app's `ready()`): every erasure asks each app for its copies of a text,
every redaction for its copies of one version, so neither needs to know the apps
above it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from django.db.models import Q, QuerySet, TextField, Value
from django.db.models.functions import Cast, StrIndex
from django.db.models.lookups import GreaterThan

from memoryadmin.core.rows import database_vendor

# What an erased text becomes (the same marker as a redacted version's).
MARKER = "[redacted]"


@dataclass(frozen=True)
class RedactedVersion:
    """The version a redaction takes: copies that name it (by its revision) go with it."""

    project_id: str
    environment: str
    resource_key: int  # the resource's primary key
    resource_id: str
    doc_id: str
    revision: str


class Erase(Protocol):
    def __call__(
        self, *, project_id: str, environment: str, needles: Sequence[str], apply: bool
    ) -> dict[str, int]:
        """How many copies of any needle each of the app's places holds (by the names an
        erasure's receipt gives them); the text replaced with `apply`."""


class Redact(Protocol):
    def __call__(self, *, version: RedactedVersion, marker: str) -> int:
        """Replaces the app's copies of the version's text with `marker`, in the caller's
        transaction; how many changed."""


@dataclass(frozen=True)
class Copies:
    erase: Erase
    # None: the app's copies name a version (ids, revision) but never hold its text.
    redact: Redact | None


_COPIES: dict[str, Copies] = {}


def copies_register(owner: str, *, erase: Erase, redact: Redact | None) -> None:
    """An app's copies of memory text (from its `ready()`): every erasure runs `erase`,
    every redaction `redact`."""
    _COPIES[owner] = Copies(erase=erase, redact=redact)


def copies_registered() -> list[Copies]:
    return list(_COPIES.values())


def stored_forms(needle: str) -> list[str]:
    """The substrings a column holding `needle` contains: the text itself, and the
    text as a JSON string's inside (escaped as json.dumps does, with and without
    ASCII escapes: SQLite keeps Django's JSON as written, PostgreSQL's jsonb does not)."""
    forms = [needle, json.dumps(needle)[1:-1], json.dumps(needle, ensure_ascii=False)[1:-1]]
    return list(dict.fromkeys(forms))


# Terms (one form of a needle in one column) per query: SQLite parses an OR of n terms
# into an expression tree n deep and refuses one past 1,000 ("Expression tree is too
# large"); a named document's past versions are hundreds of needles.
TERMS_PER_QUERY = 200


def containing(
    rows: QuerySet[Any],
    needles: Sequence[str],
    *,
    text: Iterable[str] = (),
    json_: Iterable[str] = (),
) -> list[Any]:
    """The rows of `rows` where a text column or a JSON column (read as text) contains a
    needle in any stored form: candidates, which `value_erase` confirms. Searched
    TERMS_PER_QUERY terms a query, each row once.

    On SQLite with instr(): its LIKE refuses a pattern over 50,000 bytes, and a text of
    100,000 characters (or the JSON-escaped form of 8,400 non-ASCII ones, six bytes each)
    passes that. PostgreSQL's LIKE has no such limit and its trigram indexes serve it."""
    annotations: dict[str, Any] = {}
    for name in json_:
        alias = f"_erasing_{name}"
        annotations[alias] = Cast(name, TextField())
    if annotations:
        rows = rows.alias(**annotations)
    columns = (*text, *annotations)
    terms = [
        (column, form) for needle in needles for form in stored_forms(needle) for column in columns
    ]
    instr = database_vendor() == "sqlite"
    found: dict[Any, Any] = {}
    for start in range(0, len(terms), TERMS_PER_QUERY):
        condition = Q()
        for column, form in terms[start : start + TERMS_PER_QUERY]:
            if instr:
                condition |= Q(GreaterThan(StrIndex(column, Value(form)), 0))
            else:
                condition |= Q(**{f"{column}__contains": form})
        for row in rows.filter(condition):
            found.setdefault(row.pk, row)
    return list(found.values())


def text_erase(value: str, needles: Sequence[str], marker: str = MARKER) -> tuple[str, int]:
    """`value` with every needle replaced by `marker`, and how many were."""
    count = 0
    for needle in needles:
        found = value.count(needle)
        if found:
            value = value.replace(needle, marker)
            count += found
    return value, count


def value_erase(value: Any, needles: Sequence[str], marker: str = MARKER) -> tuple[Any, int]:
    """A JSON value with every needle replaced in its strings (keys too), and how many were."""
    if isinstance(value, str):
        return text_erase(value, needles, marker)
    if isinstance(value, list):
        total = 0
        items = []
        for item in value:
            erased, count = value_erase(item, needles, marker)
            items.append(erased)
            total += count
        return items, total
    if isinstance(value, dict):
        total = 0
        result = {}
        for key, item in value.items():
            new_key, key_count = text_erase(key, needles, marker)
            erased, count = value_erase(item, needles, marker)
            result[new_key] = erased
            total += key_count + count
        return result, total
    return value, 0


def rows_erase(
    rows: QuerySet[Any],
    needles: Sequence[str],
    *,
    apply: bool,
    text: Sequence[str] = (),
    json_: Sequence[str] = (),
    fit: Mapping[str, Callable[[Any], Any]] | None = None,
) -> int:
    """How many rows of `rows` hold any of `needles` in a text column (`text`, a null
    skipped) or a JSON column (`json_`, keys too); with `apply` each such row's columns
    that held one are rewritten with the needles replaced by the marker, one update a
    row. `fit` gives a column its own rule for the erased value (e.g. clipped to the
    column's length)."""
    if not needles:
        return 0
    fit = fit or {}
    held = 0
    for row in containing(rows, needles, text=text, json_=json_):
        changed: dict[str, Any] = {}
        for name in (*text, *json_):
            value = getattr(row, name)
            if name in text and value is None:
                continue
            erased, count = (text_erase if name in text else value_erase)(value, needles)
            if count:
                changed[name] = fit[name](erased) if name in fit else erased
        if not changed:
            continue
        held += 1
        if apply:
            rows.model._base_manager.filter(pk=row.pk).update(**changed)
    return held
