"""Domain errors of HTTP memory providers."""

from __future__ import annotations

from typing import Any

from memoryadmin.memory.errors import Conflict, DomainError, NotFound


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


class SecretNotFound(NotFound):
    code = "secret_not_found"


class ProviderFailure(Conflict):
    """A provider call that produced no usable answer; a recall it belongs to is blocked.

    Messages never carry header values or secrets: transport errors are named
    by their kind only.
    """

    code = "recall_failed"

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        attempts: int = 0,
        http_status: int | None = None,
        provider_error: dict[str, Any] | None = None,
    ) -> None:
        details: dict[str, Any] = {"reason": reason, "attempts": attempts}
        if http_status is not None:
            details["status"] = http_status
        if provider_error is not None:
            details["providerError"] = provider_error
        super().__init__(message, details=details)
        self.reason = reason
        self.attempts = attempts
        self.http_status = http_status
        self.provider_error = provider_error


class ProviderBusy(DomainError):
    """The project's provider calls are at their cap: refused before anything is sent.

    Nothing reached a provider, so the caller may retry after `retry_after`
    seconds, even a write that is not idempotent.
    """

    status = 429
    code = "provider_failed"
    retry_after: int

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(
            message, details={"reason": "concurrency_limit", "retryAfter": retry_after}
        )
        self.retry_after = retry_after
