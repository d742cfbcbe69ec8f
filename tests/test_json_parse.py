"""The one JSON body reader reads with orjson where orjson reads as the standard library
does, and otherwise as it always has: the same values, the same refusals, the same words."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from memoryadmin.core.errors import InvalidRequest
from memoryadmin.core.jsonbody import json_parse
from memoryadmin.core.strings import NESTING_MAX, strings_check


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def standard(raw: bytes) -> tuple[str, Any]:
    """What the standard library's reading gives (the reader before orjson)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "refused", "The body is not valid JSON: it is not UTF-8."
    try:
        data = json.loads(text, parse_constant=_constant)
    except RecursionError:
        return "refused", f"body: JSON may nest at most {NESTING_MAX} levels deep."
    except ValueError as exc:
        return "refused", f"The body is not valid JSON: {exc}"
    try:
        strings_check(data)
    except InvalidRequest as exc:
        return "refused", exc.message
    return "read", repr(data)


def ours(raw: bytes) -> tuple[str, Any]:
    try:
        return "read", repr(json_parse(raw))
    except InvalidRequest as exc:
        return "refused", exc.message


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from(["\x00", "\ud800", "\udc00x", "\U0001f600", "\u2028", "é"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)
# Pieces no serializer writes: what a hostile or careless client might send.
ODD = [
    b"NaN",
    b"-Infinity",
    b"1e400",
    b"\xef\xbb\xbf",
    b"\xff",
    b'"\\ud800"',
    b"[1,]",
    b"{}{}",
    b'{"a":1,"a":2}',
    b"18446744073709551616",
    b"-0",
    b"1E5",
    b'"\x01"',
    b"  ",
    b"[" * 70,
]


@settings(max_examples=600, deadline=None)
@given(
    VALUES,
    st.booleans(),
    st.lists(st.tuples(st.sampled_from(ODD), st.integers(0, 200)), max_size=2),
)
def test_a_body_reads_as_the_standard_library_reads_it(
    value: Any, ascii_only: bool, insertions: list[tuple[bytes, int]]
) -> None:
    raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    for piece, at in insertions:
        raw = raw[:at] + piece + raw[at:]
    assert ours(raw) == standard(raw)


def test_the_documents_of_the_api_read_the_same() -> None:
    for raw in [
        b'{"text": "' + b"w" * 2000 + b'", "summary": "s"}',
        b'{"maxBytes": 99999999999999999999}',
        b'{"a": 1, "a": 2}',
        b'{"x": 1e400}',
        b'{"t": "\\ud83d\\ude00 \\u0000"}',
        b"[" * 65 + b"]" * 65,
    ]:
        assert ours(raw) == standard(raw), raw[:40]
