"""The one reader of the numbers and times that come from outside.

Path ids, `after`, page sizes, command-line numbers, Content-Length and
Retry-After headers, `asOf`, `since` and `until`, the times a provider or a
caller sends: each is read here. A number is ASCII digits only (`str.isdigit()`
and `int()` also take superscripts, Arabic-Indic and fullwidth digits: `int("٣")`
is 3, `int("¹")` raises) within a stated range; a time is ISO 8601 in ASCII
whose instant exists in UTC (no hour 24, no offset of a day or more, nothing
past the years 1 to 9999 once moved to UTC).

`parse_int`, `parse_instant` and `parse_date` raise InvalidInput (400
`invalid_request`, details naming the field), which every door renders as it
renders any domain error; `whole_number` answers None instead, for callers to
whom a malformed value means "absent" (a provider's header) or "not found" (a
path id).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, date, datetime

from memoryadmin.core.errors import InvalidRequest

# The largest value of a database id (a signed 64-bit integer).
INT64_MAX = 2**63 - 1
# Longer texts are not times (an ISO 8601 time with microseconds and an offset
# is 32 characters).
TIME_MAX_CHARS = 64
TIME_EXAMPLE = "2026-09-10T12:00:00Z"


class InvalidInput(InvalidRequest):
    """A number or time from outside that does not parse or is out of range."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message, details={"field": field})
        self.field = field


def whole_number(
    value: object, *, minimum: int = 0, maximum: int = INT64_MAX, clamp: bool = False
) -> int | None:
    """`value` as an int when it is an int (not a bool) or a string of ASCII digits
    (no sign, no spaces) from `minimum` to `maximum`; else None. With `clamp`, a
    number out of range is moved to the nearer bound instead."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.isascii() and value.isdigit():
        significant = value.lstrip("0") or "0"
        # Too long to be in range: no int() of it (which refuses over 4300 digits).
        number = maximum + 1 if len(significant) > len(str(maximum)) else int(significant)
    else:
        return None
    if minimum <= number <= maximum:
        return number
    if not clamp:
        return None
    return min(max(number, minimum), maximum)


def parse_int(value: object, *, field: str, minimum: int = 0, maximum: int = INT64_MAX) -> int:
    """`value` as an int from `minimum` to `maximum` (see `whole_number`); InvalidInput
    naming `field` otherwise."""
    number = whole_number(value, minimum=minimum, maximum=maximum)
    if number is None:
        raise InvalidInput(
            f"{field} must be a whole number from {minimum} to {maximum}.", field=field
        )
    return number


def int_argument(*, minimum: int = 0, maximum: int = INT64_MAX) -> Callable[[str], int]:
    """An argparse `type` reading a number the way `parse_int` does."""

    def read(text: str) -> int:
        number = whole_number(text, minimum=minimum, maximum=maximum)
        if number is None:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a whole number from {minimum} to {maximum}"
            )
        return number

    read.__name__ = "number"  # argparse names the type in its messages
    return read


def parse_instant(value: object, *, field: str, zone_required: bool = False) -> datetime:
    """An ISO 8601 time with a zone (or Z) as an aware datetime in UTC; a time without
    one is taken as UTC (InvalidInput instead with `zone_required`), a date alone as
    its midnight UTC."""
    parsed = None
    if isinstance(value, str) and value.isascii() and len(value) <= TIME_MAX_CHARS:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            parsed = None
    if parsed is not None and parsed.tzinfo is None:
        if zone_required:
            raise InvalidInput(f"{field} must carry a time zone.", field=field)
        parsed = parsed.replace(tzinfo=UTC)
    if parsed is not None:
        try:
            return parsed.astimezone(UTC)
        except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00 is before the year 1
            pass
    raise InvalidInput(f"{field} must be an ISO 8601 time, e.g. {TIME_EXAMPLE}.", field=field)


def parse_date(value: object, *, field: str) -> date:
    """An ISO 8601 date (2026-09-10); InvalidInput naming `field` otherwise."""
    if isinstance(value, str) and value.isascii() and len(value) <= TIME_MAX_CHARS:
        try:
            return date.fromisoformat(value)
        except ValueError:
            pass
    raise InvalidInput(f"{field} must be a date, e.g. {TIME_EXAMPLE[:10]}.", field=field)
