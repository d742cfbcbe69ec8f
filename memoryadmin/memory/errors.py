"""Domain errors: every door turns these into its own kind of failure.

Their root, DomainError and InvalidRequest, is the kernel's (memoryadmin.core.errors).
"""

from __future__ import annotations

from memoryadmin.core.errors import DomainError, InvalidRequest

__all__ = [
    "Conflict",
    "DomainError",
    "Forbidden",
    "InvalidRequest",
    "LimitExceeded",
    "NotFound",
    "PreconditionFailed",
    "PreconditionRequired",
    "ProjectNotFound",
    "ResourceConflict",
    "Unauthorized",
]


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
