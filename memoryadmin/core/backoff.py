"""The one backoff of retried work: the runner's, for every job kind (deliveries, operations)."""

from __future__ import annotations

# No retry waits longer, whatever the base, the attempts or a Retry-After say.
BACKOFF_MAX_SECONDS = 3600.0
# Past this many doublings every base over a microsecond is at the cap: the power
# stays small instead of growing without end with the attempts.
_DOUBLINGS_MAX = 32


def backoff_seconds(base: float, attempts: int, *, at_least: float | None = None) -> float:
    """Seconds to wait after `attempts` failed attempts: the base, doubling with every
    further attempt, at most an hour; never less than `at_least` (a Retry-After) when
    given, itself at most an hour."""
    doublings = min(max(attempts - 1, 0), _DOUBLINGS_MAX)
    pause = min(base * 2**doublings, BACKOFF_MAX_SECONDS)
    if at_least is not None:
        pause = max(pause, min(at_least, BACKOFF_MAX_SECONDS))
    return pause
