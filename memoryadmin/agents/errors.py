"""Domain errors of sessions and the memory runtime."""

from __future__ import annotations

from typing import Any

from memoryadmin.core.errors import Conflict, DomainError, InvalidToolArguments, NotFound

__all__ = [
    "IdempotencyConflict",
    "InvalidMemoryBinding",
    "InvalidToolArguments",
    "NotBound",
    "RecallBusy",
    "RecallFailed",
    "SessionClosed",
    "SessionNotFound",
]


class InvalidMemoryBinding(DomainError):
    status = 400
    code = "invalid_memory_binding"

    def __init__(self, binding: str, message: str) -> None:
        super().__init__(f"memory.{binding}: {message}", details={"binding": binding})
        self.binding = binding


class IdempotencyConflict(Conflict):
    code = "idempotency_conflict"

    def __init__(self, message: str, *, differs: list[str]) -> None:
        super().__init__(message, details={"differs": differs})
        self.differs = differs


class SessionNotFound(NotFound):
    pass


class SessionClosed(Conflict):
    code = "session_closed"


class NotBound(DomainError):
    status = 400
    code = "not_bound"


class RecallFailed(Conflict):
    code = "recall_failed"

    def __init__(
        self,
        message: str,
        *,
        resource: str,
        reason: str,
        retryable: bool | None = None,
        retry_after: int | None = None,
    ) -> None:
        details: dict[str, Any] = {"resource": resource, "reason": reason}
        if retryable is not None:
            details["retryable"] = retryable
        super().__init__(message, details=details, retry_after=retry_after)
        self.resource = resource
        self.reason = reason


class RecallBusy(RecallFailed):
    """The project's provider calls are at their cap: nothing was sent; retry later."""

    status = 429

    def __init__(self, message: str, *, resource: str, retry_after: int) -> None:
        super().__init__(
            message, resource=resource, reason="concurrency_limit", retry_after=retry_after
        )
