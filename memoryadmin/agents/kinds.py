"""The runtime's provider interface: what every provider kind implements for sessions.

A kind's declaration, documents and records are memory's part of it
(`ResourceKind`, memoryadmin/memory/providers.py, whose registry holds every
kind); `MemoryProvider` adds what the runtime asks of a kind: admitting a
binding, recalling, offering and executing tools, reporting on operations.
A kind implements its own I/O only: the runtime (services/runtime.py)
checks the session, the binding's access and whether memory is writable,
and holds every recall's one deadline, its one reservation of the
project's provider calls and its cancellation. docs/providers.md ("Writing
a provider kind") walks through it.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from memoryadmin.memory import providers as kinds
from memoryadmin.memory.providers import NotSupported, ResourceKind, Result, provider_kinds

if TYPE_CHECKING:
    from memoryadmin.agents.bindings import BindingSpec
    from memoryadmin.agents.models import Binding, ProviderOperation, Recall, Session
    from memoryadmin.core.concurrency import Deadline
    from memoryadmin.memory.models import Resource

__all__ = [
    "DOOR_TOOLS",
    "RECALL_TOOL",
    "MemoryProvider",
    "NotSupported",
    "OperationCheck",
    "Projection",
    "RecallCall",
    "Result",
    "ToolOffer",
    "ToolTarget",
    "provider_for",
    "provider_kinds",
    "providers",
    "reserved_tool_names",
]


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

    state: "queued" or "partial" (still open), "succeeded" or "failed" (terminal);
    `record_ids`: for a write that succeeded, the records it stored, where the provider
    names them (ours, as the kind's records are addressed).
    """

    state: str
    detail: str = ""
    record_ids: tuple[str, ...] = ()


class MemoryProvider(ResourceKind):
    """One provider kind, as the runtime sees it."""

    # Tool names this kind may offer; known to the runtime even where no
    # binding offers them, and no declared tool may take one of them.
    reserved_tools: ClassVar[tuple[str, ...]] = ()
    # Whether a recall reads this kind's memory here, in the caller's thread and before
    # any provider is called (`recall`), rather than through calls (`recall_calls`).
    recalls_here: ClassVar[bool] = False

    # Bindings.

    @abstractmethod
    def admit(self, *, bindings: list[tuple[BindingSpec, Resource]]) -> None:
        """Raises InvalidMemoryBinding when a resource cannot take its binding: a new
        session's bindings to this kind's resources, all at once (one look-up for all)."""

    # The runtime.

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


def provider_for(kind: str) -> MemoryProvider:
    """The registered kind (InvalidRequest when none is); every kind is a MemoryProvider."""
    provider = kinds.provider_for(kind)
    assert isinstance(provider, MemoryProvider), kind
    return provider


def providers() -> list[MemoryProvider]:
    """The registered kinds, those that keep documents here first (they need no
    network, so a local failure blocks a recall before any remote call)."""
    return [p for p in kinds.providers() if isinstance(p, MemoryProvider)]


# The tools a door offers beside a session's own: the MCP server's memory_recall.
RECALL_TOOL = "memory_recall"
DOOR_TOOLS: tuple[str, ...] = (RECALL_TOOL,)


def reserved_tool_names() -> set[str]:
    """The names no declared tool may take (`bindings_tools_check`): the tools the kinds
    offer of their own and those a door adds, so that neither shadows the other."""
    return {name for p in providers() for name in p.reserved_tools} | set(DOOR_TOOLS)
