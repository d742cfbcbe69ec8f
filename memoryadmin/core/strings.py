"""The one string rule: no NUL and no unpaired surrogate in any string, keys included.

Neither can be kept everywhere: PostgreSQL refuses NUL in text and both in
jsonb, and an unpaired surrogate has no UTF-8 encoding, so a row holding one
can be stored (SQLite keeps JSON escapes as they came) but never rendered
again. Every door (JSON bodies, path and query, forms, CLI arguments and
files) checks its input here before anything is stored; the services check
again; `manage.py doctor` repairs rows that an earlier version stored.
"""

from __future__ import annotations

import re
from typing import Any

from memoryadmin.core.errors import InvalidRequest

# In a Python string a code point in the surrogate range is always unpaired:
# characters outside the BMP are single code points, not surrogate pairs.
FORBIDDEN_RE = re.compile("[\x00\ud800-\udfff]")
# How deep a JSON document may nest (objects and arrays).
NESTING_MAX = 64
REPLACEMENT = "\ufffd"


_NUL_PROBLEM = "a NUL character (U+0000)"


def string_breaks_rule(value: str) -> bool:
    """Whether something in `value` breaks the rule."""
    return string_problem(value) is not None


def string_problem(value: str) -> str | None:
    """What breaks the rule in `value` (None when nothing does). An ASCII string (asked of
    Python in constant time) can hold no surrogate: only NUL is looked for, at the speed
    of a byte search, where the pattern costs about 6 ns a character (12 us for a
    2,000-character document text, read several times by a write)."""
    if value.isascii():
        return _NUL_PROBLEM if "\x00" in value else None
    match = FORBIDDEN_RE.search(value)
    if match is None:
        return None
    if match.group() == "\x00":
        return _NUL_PROBLEM
    return f"an unpaired surrogate (U+{ord(match.group()):04X})"


def printable(value: str) -> str:
    """`value` with its forbidden code points written as escapes: safe to show and to encode."""
    return FORBIDDEN_RE.sub(lambda match: f"\\u{ord(match.group()):04x}", value)


def string_repair(value: str) -> str:
    """`value` with each forbidden code point replaced by U+FFFD."""
    return FORBIDDEN_RE.sub(REPLACEMENT, value)


def _refuse(field: str, problem: str, *, key: bool = False) -> InvalidRequest:
    what = "the key" if key else "the value"
    return InvalidRequest(
        f"{field}: {what} contains {problem}; strings must not contain NUL "
        "or unpaired surrogates (U+D800-U+DFFF).",
        details={"field": field},
    )


def string_check(value: str, *, field: str) -> str:
    problem = string_problem(value)
    if problem is not None:
        raise _refuse(field, problem)
    return value


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{printable(key)}" if path else printable(key)


def strings_check(value: object, *, field: str = "") -> None:
    """Refuses the first string or key of `value` that breaks the rule, and nesting
    deeper than NESTING_MAX, naming where (400 invalid_request, details.field)."""
    # Iterative, so that no input can exhaust the stack.
    pending: list[tuple[object, str, int]] = [(value, field, 0)]
    while pending:
        item, path, depth = pending.pop()
        if isinstance(item, str):
            string_check(item, field=path or "body")
            continue
        if not isinstance(item, dict | list):
            continue
        if depth >= NESTING_MAX:
            raise InvalidRequest(
                f"{path or 'body'}: JSON may nest at most {NESTING_MAX} levels deep.",
                details={"field": path or "body"},
            )
        if isinstance(item, list):
            pending.extend((child, _child(path, i), depth + 1) for i, child in enumerate(item))
            continue
        for key, child in item.items():
            if isinstance(key, str):
                problem = string_problem(key)
                if problem is not None:
                    raise _refuse(_child(path, key), problem, key=True)
            pending.append((child, _child(path, str(key)), depth + 1))


def value_repair(value: Any) -> Any:
    """`value` (a string or a JSON value) with every forbidden code point replaced, keys too."""
    if isinstance(value, str):
        return string_repair(value)
    if isinstance(value, list):
        return [value_repair(item) for item in value]
    if isinstance(value, dict):
        return {value_repair(key): value_repair(item) for key, item in value.items()}
    return value
