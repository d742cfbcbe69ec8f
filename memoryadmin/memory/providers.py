"""Resource kinds: what memory knows of every provider kind, and their registry.

A provider kind (`document`, `http`, ...) is one class, registered once from
its app's `ready()` with `provider_register`. This layer knows what a kind
declares and keeps (`ResourceKind`: its declaration, whether it keeps
documents here, its records); what it does in a session (bindings, recalls,
tools, operations) is the runtime's interface above, `MemoryProvider` in
memoryadmin/agents/kinds.py, which every registered kind implements.
Nothing outside a provider's own module tests a kind. docs/providers.md
("Writing a provider kind") walks through it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from memoryadmin.core.errors import DomainError, InvalidRequest

if TYPE_CHECKING:
    from memoryadmin.memory.models import Project, Resource

Result = dict[str, Any]


class NotSupported(DomainError):
    """The provider does not offer this operation (for example: no remote record management)."""

    status = 400
    code = "not_supported"


class ResourceKind(ABC):
    """What memory asks of one provider kind. Instances are stateless; one is registered
    per kind."""

    kind: ClassVar[str]
    # Whether the resource's records are documents stored here (the document
    # API, the Memory page's editor, export and the CLI work on them).
    keeps_documents: ClassVar[bool] = False
    # Whether its records can be listed, read and changed here through the provider
    # (the records API, the Memory page and the CLI's records commands).
    manages_records: ClassVar[bool] = False

    # Declarations.

    @abstractmethod
    def normalize(self, provider: dict[str, Any], where: str, *, project: str) -> dict[str, Any]:
        """The checked, normalised `provider` object of a declaration of `project` (with
        `kind` and `maxBytes`); raises InvalidRequest naming the field under `where`. Names
        an origin's check resolves count against `project`'s share of lookups."""

    def promote_check(
        self, *, project: Project, environment: str, provider: dict[str, Any], where: str
    ) -> None:
        """What must also hold when a declaration takes effect in an environment."""
        return None

    def public(self, provider: dict[str, Any]) -> dict[str, Any]:
        """How responses show a stored provider object (no secret values)."""
        return provider

    def declared_tools(self, resource: Resource) -> list[dict[str, Any]]:
        """Tools the resource's declaration adds (`name`, `input`), checked for collisions
        across a session's bindings when it is created."""
        return []

    # Records that live with the provider (default: not supported).

    def records_list(
        self, *, resource: Resource, namespace: str, cursor: str | None = None
    ) -> tuple[list[Result], str | None]:
        raise self._unsupported("list")

    def records_search(
        self, *, resource: Resource, namespace: str, query: str, limit: int = 10
    ) -> list[Result]:
        raise self._unsupported("search")

    def record_create(self, *, resource: Resource, namespace: str, text: str) -> Result:
        raise self._unsupported("create")

    def record_get(self, *, resource: Resource, namespace: str, record_id: str) -> Result:
        raise self._unsupported("get")

    def record_update(
        self, *, resource: Resource, namespace: str, record_id: str, changes: dict[str, Any]
    ) -> Result:
        raise self._unsupported("update")

    def record_delete(self, *, resource: Resource, namespace: str, record_id: str) -> Result:
        raise self._unsupported("delete")

    def record_history(self, *, resource: Resource, namespace: str, record_id: str) -> list[Result]:
        raise self._unsupported("history")

    def _unsupported(self, operation: str) -> NotSupported:
        return NotSupported(
            f"{self.kind} providers do not support {operation} of their records here."
        )


_REGISTRY: dict[str, ResourceKind] = {}


def provider_register(provider: ResourceKind) -> None:
    """Makes a kind available; called from its app's `ready()`. Registering twice replaces."""
    _REGISTRY[provider.kind] = provider


def provider_unregister(kind: str) -> None:
    _REGISTRY.pop(kind, None)


def provider_for(kind: str) -> ResourceKind:
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise InvalidRequest(
            f"provider.kind must be one of: {', '.join(sorted(_REGISTRY))}."
        ) from None


def provider_kinds() -> list[str]:
    return sorted(_REGISTRY)


def providers() -> list[ResourceKind]:
    """The registered kinds, those that keep documents here first (they need no
    network, so a local failure blocks a recall before any remote call)."""
    return sorted(_REGISTRY.values(), key=lambda p: (not p.keeps_documents, p.kind))


def kinds_keeping_documents() -> list[str]:
    return [p.kind for p in providers() if p.keeps_documents]


def manages_records(resource: Resource) -> bool:
    provider = _REGISTRY.get(resource.kind)
    return provider is not None and provider.manages_records


def keeps_documents(resource: Resource) -> bool:
    provider = _REGISTRY.get(resource.kind)
    return provider is not None and provider.keeps_documents
