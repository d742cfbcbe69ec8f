"""The provider interface: what every memory provider kind implements, and its registry.

A provider kind (`document`, `http`, ...) is one class implementing
`MemoryProvider`, registered once from its app's `ready()` with
`provider_register`. Everything else (deployments, bindings, the runtime,
the API, the Memory page, the CLI) asks the registry and the interface;
nothing outside a provider's own module tests a kind. docs/providers.md
("Writing a provider kind") walks through it.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from memoryadmin.core.errors import DomainError, InvalidRequest

if TYPE_CHECKING:
    from memoryadmin.agents.bindings import BindingSpec
    from memoryadmin.agents.models import Binding, ProviderOperation, Recall, Session
    from memoryadmin.core.concurrency import Deadline
    from memoryadmin.memory.models import Project, Resource

Result = dict[str, Any]


class NotSupported(DomainError):
    """The provider does not offer this operation (for example: no remote record management)."""

    status = 400
    code = "not_supported"


@dataclass
class Projection:
    """What one bound resource contributes to a recall.

    `writable` is whether the kind lets what it shows be written at all (a collection's
    overview or a document whose agent writes are off: no); the runtime adds what holds
    for every kind (an active session, a read-write binding) before the model sees it.
    """

    text: str
    sources: list[dict[str, Any]]
    writable: bool = True
    # The document revision later saves must match (document bindings only).
    revision: str | None = None
    # A provider's read state for this recall's tool calls; never shown to the model.
    cursor: str | None = None


@dataclass(frozen=True)
class RecallCall[T]:
    """One binding's recall by a kind that calls out, prepared in the caller's thread.

    `send` is the I/O only: the runtime runs it on a thread of its own (no
    database there), concurrently with every other bound resource's call, all
    within the recall's one deadline; it stops early when its event is set (the
    recall no longer wants the answer, or was cancelled). `projection` turns
    what `send` returned into the binding's projection, in the caller's thread;
    it raises RecallFailed when the recall must be blocked. `settle`, if any,
    runs in the caller's thread once the recall's calls are over, whatever
    their outcome (a kind audits there what its calls deferred).
    """

    send: Callable[[threading.Event], T]
    projection: Callable[[T], Projection]
    settle: Callable[[], None] | None = None


@dataclass(frozen=True)
class ToolOffer:
    """One tool one binding offers, as its provider describes it.

    `writes` says the tool changes memory: the runtime then offers it only
    through a read-write binding; through a read binding it is not shown to the
    model, and a call that names that binding is rejected with `refusal`.
    `spec` is the provider's own data for executing the call.
    """

    name: str
    schema: dict[str, Any]
    writes: bool = False
    refusal: str = "not_bound"
    spec: Any = field(default=None, compare=False)


@dataclass(frozen=True)
class ToolTarget:
    """A tool offered by one binding of a session."""

    binding: Binding
    offer: ToolOffer

    @property
    def resource_id(self) -> str:
        return self.binding.resource.resource_id

    @property
    def permitted(self) -> bool:
        """A read binding never writes."""
        return not self.offer.writes or self.binding.access == "read-write"


@dataclass(frozen=True)
class OperationCheck:
    """Where the provider says an asynchronous operation stands.

    state: "queued" or "partial" (still open), "succeeded" or "failed" (terminal).
    """

    state: str
    detail: str = ""


class MemoryProvider(ABC):
    """One provider kind. Instances are stateless; one is registered per kind."""

    kind: ClassVar[str]
    # Whether the resource's records are documents stored here (the document
    # API, the Memory page's editor, export and the CLI work on them).
    keeps_documents: ClassVar[bool] = False
    # Whether its records can be listed, read and changed here through the provider
    # (the records API, the Memory page and the CLI's records commands).
    manages_records: ClassVar[bool] = False
    # Tool names this kind may offer; known to the runtime even where no
    # binding offers them, and no declared tool may take one of them.
    reserved_tools: ClassVar[tuple[str, ...]] = ()
    # Whether a recall reads this kind's memory here, in the caller's thread and before
    # any provider is called (`recall`), rather than through calls (`recall_calls`).
    recalls_here: ClassVar[bool] = False

    # Declarations.

    @abstractmethod
    def normalize(self, provider: dict[str, Any], where: str) -> dict[str, Any]:
        """The checked, normalised `provider` object of a declaration (with `kind` and
        `maxBytes`); raises InvalidRequest naming the field under `where`."""

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

    # Bindings.

    @abstractmethod
    def admit(self, *, spec: BindingSpec, resource: Resource) -> None:
        """Raises InvalidMemoryBinding when this resource cannot take the binding."""

    # The runtime. A kind implements its own I/O only: the runtime checks the session,
    # the binding's access and whether memory is writable, and holds every recall's one
    # deadline, its one reservation of the project's provider calls and its cancellation.

    def recall(self, *, session: Session, bindings: list[Binding]) -> dict[str, Projection]:
        """Projections of this kind's bindings read here, in the caller's thread, keyed by
        resource id (kinds with `recalls_here`); raises RecallFailed."""
        raise NotSupported(f"{self.kind} providers recall through calls.")

    def recall_calls(
        self,
        *,
        session: Session,
        bindings: list[Binding],
        recall_id: str,
        input_text: str | None,
        deadline: Deadline,
    ) -> list[RecallCall[Any]]:
        """One prepared call per binding, in the order of `bindings` (kinds that call out).

        Runs inside the recall's reservation, so anything it sends already counts;
        raises RecallFailed when a call cannot be prepared.
        """
        raise NotSupported(f"{self.kind} providers recall here.")

    def tools(self, *, binding: Binding) -> list[ToolOffer]:
        """The tools a binding offers, including those its access does not permit."""
        return []

    def tool_definition(self, *, name: str, targets: list[ToolTarget]) -> Result:
        """What the model sees of a tool offered by these targets (at least one)."""
        raise NotSupported(f"{self.kind} providers offer no tool {name}.")

    def tool_check(self, *, name: str, arguments: dict[str, Any]) -> None:
        """Checks a call's arguments before its target is chosen (InvalidToolArguments)."""
        return None

    def tool_execute(
        self,
        *,
        session: Session,
        recall: Recall,
        target: ToolTarget,
        call_id: str,
        arguments: dict[str, Any],
    ) -> Result:
        """Runs one call against its chosen target; the result reaches the model."""
        raise NotSupported(f"{self.kind} providers offer no tool {target.offer.name}.")

    # Asynchronous operations (the durable operation store reconciles them).

    def operation_check(self, *, operation: ProviderOperation) -> OperationCheck:
        """Asks the provider where an open operation stands; raises on no usable answer
        (the attempt counts, and the operation is dead-lettered when attempts run out)."""
        raise NotSupported(f"{self.kind} providers cannot report on operations.")

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


_REGISTRY: dict[str, MemoryProvider] = {}


def provider_register(provider: MemoryProvider) -> None:
    """Makes a kind available; called from its app's `ready()`. Registering twice replaces."""
    _REGISTRY[provider.kind] = provider


def provider_unregister(kind: str) -> None:
    _REGISTRY.pop(kind, None)


def provider_for(kind: str) -> MemoryProvider:
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise InvalidRequest(
            f"provider.kind must be one of: {', '.join(sorted(_REGISTRY))}."
        ) from None


def provider_kinds() -> list[str]:
    return sorted(_REGISTRY)


def providers() -> list[MemoryProvider]:
    """The registered providers, those that keep documents here first (they need no
    network, so a local failure blocks a recall before any remote call)."""
    return sorted(_REGISTRY.values(), key=lambda p: (not p.keeps_documents, p.kind))


def kinds_keeping_documents() -> list[str]:
    return [p.kind for p in providers() if p.keeps_documents]


def reserved_tool_names() -> set[str]:
    return {name for p in _REGISTRY.values() for name in p.reserved_tools}


def manages_records(resource: Resource) -> bool:
    provider = _REGISTRY.get(resource.kind)
    return provider is not None and provider.manages_records


def keeps_documents(resource: Resource) -> bool:
    provider = _REGISTRY.get(resource.kind)
    return provider is not None and provider.keeps_documents
