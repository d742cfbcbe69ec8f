"""Domain errors of HTTP memory providers."""

from __future__ import annotations

from memoryadmin.core.errors import Conflict, DomainError, NotFound


class SecretNotFound(NotFound):
    code = "secret_not_found"


class SecretNotBound(DomainError):
    """A secret that may not be sent where a connection would send it."""

    status = 400
    code = "invalid_request"


class CallFailed(DomainError):
    """A call to a provider (http or external) without a usable answer.

    What the caller sees is generic: the resource and whether trying again may
    help. `reason`, `attempts` and `http_status` are for the host's own logs
    and tests; they never reach the response.
    """

    def __init__(
        self,
        message: str,
        *,
        resource: str,
        retryable: bool,
        reason: str,
        attempts: int = 0,
        http_status: int | None = None,
    ) -> None:
        super().__init__(message, details={"resource": resource, "retryable": retryable})
        self.resource = resource
        self.retryable = retryable
        self.reason = reason
        self.attempts = attempts
        self.http_status = http_status


class ProviderFailure(CallFailed, Conflict):
    """An http provider's call failed; a recall it belongs to is blocked (409)."""

    code = "recall_failed"
