"""The domain errors: every door turns these into its own kind of failure.

The family every app raises and builds on (each app's errors module adds its own
codes): a status, which is its kind, a code and a message, and details for the
envelope, the one shape every door and every tool result gives a failure
(`error_envelope`, `envelope_of`).
"""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    status = 400
    code = "invalid_request"
    # Seconds after which a retry may succeed (a Retry-After header), if known.
    retry_after: int | None = None

    def __init__(
        self, message: str, *, details: dict[str, Any] | None = None, retry_after: int | None = None
    ) -> None:
        """`retry_after`, where a retry succeeds after that many seconds: said to the caller
        in the details (`retryAfter`) and by every door over HTTP (`headers`)."""
        super().__init__(message)
        self.message = message
        self.details = details or {}
        if retry_after is not None:
            self.details["retryAfter"] = retry_after
            self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        """The HTTP headers every door answers it with: Retry-After, where known."""
        return {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}


def error_envelope(
    code: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """{"error": {"code", "message", "details"?}}: details only when there are any."""
    error: dict[str, Any] = {"code": code, "message": message}
    if details:
        error["details"] = details
    return {"error": error}


def envelope_of(exc: DomainError, *, code: str | None = None) -> dict[str, Any]:
    """A domain error's envelope; `code` where the context names it otherwise (a tool
    call's failed provider is `provider_failed` whatever blocked it)."""
    return error_envelope(code or exc.code, exc.message, exc.details)


class InvalidRequest(DomainError):
    status = 400
    code = "invalid_request"


class Unauthorized(DomainError):
    status = 401
    code = "unauthorized"


class Forbidden(DomainError):
    status = 403
    code = "forbidden"


class NotFound(DomainError):
    status = 404
    code = "not_found"


class ProjectNotFound(NotFound):
    code = "project_not_found"


class Conflict(DomainError):
    status = 409
    code = "conflict"


class ResourceConflict(Conflict):
    code = "resource_conflict"


class PreconditionFailed(DomainError):
    status = 412
    code = "precondition_failed"


class LimitExceeded(DomainError):
    status = 413
    code = "memory_limit_exceeded"

    def __init__(self, message: str, *, field: str, bytes: int, max_bytes: int) -> None:
        super().__init__(message, details={"field": field, "bytes": bytes, "maxBytes": max_bytes})
        self.field = field
        self.bytes = bytes
        self.max_bytes = max_bytes


class PreconditionRequired(DomainError):
    status = 428
    code = "precondition_required"


class InvalidToolArguments(DomainError):
    status = 400
    code = "invalid_tool_arguments"


class ToolNotPermitted(DomainError):
    """A write tool called through a read-only binding: the call is never sent."""

    status = 400
    code = "not_bound"


class ToolCollision(DomainError):
    status = 400
    code = "tool_collision"


class ProviderBusy(DomainError):
    """The project's provider calls are at their cap: refused before anything is sent.

    Nothing reached a provider, so the caller may retry after `retry_after`
    seconds, even a write that is not idempotent.
    """

    status = 429
    code = "provider_failed"
    retry_after: int

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message, details={"reason": "concurrency_limit"}, retry_after=retry_after)
