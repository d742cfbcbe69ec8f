"""The audit log as files: CSV for spreadsheets, JSON Lines for tools."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

COLUMNS = ["id", "time", "environment", "actor", "action", "resource", "document", "revision"]
# A cell starting with one of these is a formula to a spreadsheet: written as text instead.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class _Line:
    """A file-like object that hands back what csv.writer writes."""

    def write(self, value: str) -> str:
        return value


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return f"'{text}" if text.startswith(FORMULA_STARTS) else text


def audit_csv(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    writer = csv.writer(_Line())
    yield writer.writerow([*COLUMNS, "detail"])
    for row in rows:
        yield writer.writerow([*(_cell(row[c]) for c in COLUMNS), _cell(row["detail"])])


def audit_jsonl(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    for row in rows:
        yield json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n"


DOWNLOADS: dict[str, tuple[str, Callable[[Iterable[dict[str, Any]]], Iterator[str]]]] = {
    "csv": ("text/csv; charset=utf-8", audit_csv),
    "jsonl": ("application/jsonl; charset=utf-8", audit_jsonl),
}
