"""A provider kind that exists only in the test suite: `echo`.

It is the whole of what a new kind needs (one module, plus one
`provider_register` call): it keeps a namespace's notes in process memory,
recalls them, offers `memory_note` (a write) and `memory_notes` (a read), and
manages its records the way a provider whose records live elsewhere does.
It implements its own I/O only: the runtime holds every rule that is the same
for all kinds (ended sessions, read bindings, writable memory, the recall's
deadline, reservation and cancellation), which tests/test_provider_conformance.py
checks against it.
"""

from __future__ import annotations

import threading
from typing import Any

from memoryadmin.agents.bindings import BindingSpec
from memoryadmin.agents.errors import InvalidMemoryBinding
from memoryadmin.agents.kinds import (
    MemoryProvider,
    Projection,
    RecallCall,
    Result,
    ToolOffer,
    ToolTarget,
)
from memoryadmin.agents.models import Binding, Recall, Scope, Session
from memoryadmin.core.errors import InvalidRequest, NotFound
from memoryadmin.memory.models import Resource

NOTE_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}


class EchoProvider(MemoryProvider):
    kind = "echo"

    def __init__(self) -> None:
        # (resource id, namespace) -> notes, oldest first.
        self.notes: dict[tuple[str, str], list[str]] = {}

    def normalize(self, provider: dict[str, Any], where: str, *, project: str) -> dict[str, Any]:
        if set(provider) - {"kind", "maxBytes"}:
            raise InvalidRequest(f"{where}.provider takes kind and maxBytes only.")
        return {"kind": self.kind, "maxBytes": provider.get("maxBytes", 1024)}

    def admit(self, *, bindings: list[tuple[BindingSpec, Resource]]) -> None:
        for spec, _ in bindings:
            if spec.scope != Scope.NAMESPACE:
                raise InvalidMemoryBinding(spec.resource, "echo takes namespace bindings only.")

    def recall_calls(
        self,
        *,
        session: Session,
        bindings: list[Binding],
        recall_id: str,
        input_text: str | None,
        deadline: Any,
    ) -> list[RecallCall[Any]]:
        return [
            RecallCall(send=self._reader(b.resource.resource_id, b.target_id), projection=_shown)
            for b in bindings
        ]

    def _reader(self, resource_id: str, namespace: str) -> Any:
        def read(cancelled: threading.Event) -> list[str]:
            return list(self.notes.get((resource_id, namespace), []))

        return read

    def tools(self, *, binding: Binding) -> list[ToolOffer]:
        return [
            ToolOffer(name="memory_note", schema=NOTE_SCHEMA, writes=True),
            ToolOffer(name="memory_notes", schema={"type": "object"}),
        ]

    def tool_definition(self, *, name: str, targets: list[ToolTarget]) -> Result:
        return {
            "name": name,
            "description": "Echo notes.",
            "inputSchema": {"type": "object", "properties": {"memory": {"type": "string"}}},
        }

    def tool_execute(
        self,
        *,
        session: Session,
        recall: Recall,
        target: ToolTarget,
        call_id: str,
        arguments: dict[str, Any],
    ) -> Result:
        key = (target.resource_id, target.binding.target_id)
        if target.offer.name == "memory_notes":
            return {"notes": self.notes.get(key, [])}
        self.notes.setdefault(key, []).append(str(arguments.get("text", "")))
        return {"status": "stored"}

    def records_list(
        self, *, resource: Resource, namespace: str, cursor: str | None = None
    ) -> tuple[list[Result], str | None]:
        notes = self.notes.get((resource.resource_id, namespace), [])
        return [{"id": str(i), "text": text} for i, text in enumerate(notes)], None

    def record_delete(self, *, resource: Resource, namespace: str, record_id: str) -> Result:
        notes = self.notes.get((resource.resource_id, namespace), [])
        if not record_id.isdigit() or int(record_id) >= len(notes):
            raise NotFound(f"No record '{record_id}'.")
        notes.pop(int(record_id))
        return {"id": record_id, "deleted": True}


def _shown(notes: list[str]) -> Projection:
    return Projection(text="\n".join(notes), sources=[])
