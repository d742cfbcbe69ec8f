"""The root of the domain errors: every door turns these into its own kind of failure.

memoryadmin.memory.errors and each app's errors module build on these two.
"""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    status = 400
    code = "invalid_request"
    # Seconds after which a retry may succeed (a Retry-After header), if known.
    retry_after: int | None = None

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class InvalidRequest(DomainError):
    status = 400
    code = "invalid_request"
