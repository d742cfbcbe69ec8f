"""A request rate as an operator writes it, `600/minute` (`second`, `minute`, `hour` or
`day`): read by the settings at start-up and by the rate limits on each request, one rule."""

from __future__ import annotations

import functools

PERIODS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


@functools.cache
def parse_rate(rate: str) -> tuple[int, int]:
    """`1200/minute` as (1200, 60): the count (at least 1) and the period in seconds;
    ValueError for anything else."""
    count, _, period = rate.partition("/")
    if not count.isdigit() or int(count) < 1 or period not in PERIODS:
        raise ValueError(f"{rate!r} is not a rate such as 600/minute")
    return int(count), PERIODS[period]
