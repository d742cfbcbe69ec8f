"""The memory runtime: recall before each model request, then the model's tool calls.

A recall reads every bound resource and remembers the revision of each bound
document. A save replaces its document only if that revision is still
current, so another writer's edit, or an earlier save from the same recall,
turns into a conflict.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from functools import partial, reduce
from operator import or_
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from memoryadmin.agents.bindings import binding_partition
from memoryadmin.agents.errors import (
    InvalidToolArguments,
    NotBound,
    RecallBusy,
    RecallFailed,
    SessionClosed,
)
from memoryadmin.agents.models import Access, Binding, EventType, Recall, Scope, Session
from memoryadmin.agents.representations import source_dict, tool_document_dict
from memoryadmin.agents.services.sessions import event_append, session_lock
from memoryadmin.memory.errors import (
    InvalidRequest,
    LimitExceeded,
    NotFound,
    PreconditionFailed,
)
from memoryadmin.memory.limits import (
    DOCUMENT_ID_RE,
    OVERVIEW_MAX_BYTES,
    OVERVIEW_MAX_ENTRIES,
    utf8_len,
)
from memoryadmin.memory.models import Document, ProviderKind, WriterKind
from memoryadmin.memory.services.documents import (
    AgentWritesDisabled,
    Writer,
    document_get,
    document_list,
    document_replace,
)
from memoryadmin.providers.client import (
    RecallReply,
    RecallRequest,
    provider_tool,
    recall_outcome,
    recall_request,
    recall_send,
)
from memoryadmin.providers.concurrency import Deadline, ProviderCalls
from memoryadmin.providers.errors import ProviderBusy, ProviderFailure
from memoryadmin.providers.tools import (
    TOOL_PREFIX,
    http_tool_definition,
    http_tools,
    http_tools_merge,
    tool_permits,
)

Result = dict[str, Any]
CALL_ID_MAX = 256


def new_recall_id() -> str:
    return "mrq_" + secrets.token_hex(12)


@dataclass
class Projection:
    text: str
    sources: list[dict[str, Any]]
    writable: bool
    # The document revision later saves must match (document bindings only).
    revision: str | None = None
    # A provider's read state for this recall's tool calls; never shown to the model.
    cursor: str | None = None

    def public(self) -> dict[str, Any]:
        return {"text": self.text, "sources": self.sources, "writable": self.writable}


def _one_line(value: str) -> str:
    # One entry per line: a line break inside a title or summary would forge
    # another entry, so it is shown as a space.
    return " ".join(value.splitlines())


def collection_overview(*, binding: Binding) -> Projection:
    """Newest first: `id | title | summary | YYYY-MM-DD`, whole entries only."""
    rows, _ = document_list(resource=binding.resource, limit=OVERVIEW_MAX_ENTRIES)
    lines: list[str] = []
    sources: list[dict[str, Any]] = []
    size = 0
    for row in rows:
        day = row["updated_at"].astimezone(UTC).date().isoformat()
        line = " | ".join((row["doc_id"], _one_line(row["title"]), _one_line(row["summary"]), day))
        added = utf8_len(line) + (1 if lines else 0)
        if size + added > OVERVIEW_MAX_BYTES:
            break
        size += added
        lines.append(line)
        sources.append(source_dict(row))
    return Projection(text="\n".join(lines), sources=sources, writable=False)


def _bound_documents(bindings: list[Binding]) -> dict[tuple[int, str], Document]:
    """The live documents of document bindings, read in one query."""
    wanted = [b for b in bindings if b.scope == Scope.DOCUMENT]
    if not wanted:
        return {}
    match = reduce(or_, (Q(resource_id=b.resource_id, doc_id=b.target_id) for b in wanted))
    return {(d.resource_id, d.doc_id): d for d in Document.objects.live().filter(match)}


def _document_projections(
    *, session: Session, bindings: list[Binding], recall_id: str, input_text: str | None = None
) -> dict[str, Projection]:
    documents = _bound_documents(bindings)
    projections: dict[str, Projection] = {}
    for binding in bindings:
        resource_id = binding.resource.resource_id
        if binding.scope == Scope.COLLECTION:
            projections[resource_id] = collection_overview(binding=binding)
            continue
        if binding.scope != Scope.DOCUMENT:
            raise RecallFailed(
                f"Resource '{resource_id}' cannot recall a {binding.scope} binding.",
                resource=resource_id,
                reason="invalid_binding",
            )
        found = documents.get((binding.resource_id, binding.target_id))
        if found is None:
            raise RecallFailed(
                f"Bound document '{binding.target_id}' of '{resource_id}' no longer exists.",
                resource=resource_id,
                reason="not_found",
            )
        writable = session.is_active and binding.access == Access.READ_WRITE and found.agent_writes
        projections[resource_id] = Projection(
            text=found.text,
            sources=[source_dict(found)],
            writable=writable,
            revision=found.revision,
        )
    return projections


def _http_projections(
    *, session: Session, bindings: list[Binding], recall_id: str, input_text: str | None = None
) -> dict[str, Projection]:
    """Every namespace binding's provider, called concurrently within one shared deadline."""
    deadline = Deadline.after()
    requests: list[RecallRequest] = []
    for binding in bindings:
        resource_id = binding.resource.resource_id
        try:
            requests.append(
                recall_request(
                    resource=binding.resource,
                    partition=binding_partition(session=session, binding=binding),
                    access=binding.access,
                    operation_id=f"{recall_id}:{resource_id}",
                    input_text=input_text,
                    deadline=deadline,
                )
            )
        except ProviderFailure as exc:
            raise RecallFailed(
                exc.message, resource=resource_id, reason="provider_failed", retryable=exc.retryable
            ) from exc
    projections: dict[str, Projection] = {}
    try:
        calls = ProviderCalls[RecallReply](
            project_id=session.project_id, count=len(requests), deadline=deadline
        )
    except ProviderBusy as exc:
        raise RecallBusy(
            exc.message, resource=requests[0].resource.resource_id, retry_after=exc.retry_after
        ) from exc
    with calls:
        sends = [partial(recall_send, request, deadline=deadline) for request in requests]
        for index, sent in calls.run(sends):
            binding = bindings[index]
            try:
                outcome = recall_outcome(requests[index], sent)
            except ProviderFailure as exc:
                # Never substitute empty memory: the whole recall fails, and
                # the calls still running are abandoned.
                # The caller learns only that it failed and whether to retry;
                # the details are in the server log and the audit log.
                raise RecallFailed(
                    exc.message,
                    resource=binding.resource.resource_id,
                    reason="provider_failed",
                    retryable=exc.retryable,
                ) from exc
            projections[binding.resource.resource_id] = Projection(
                text=outcome.text,
                sources=outcome.sources,
                writable=session.is_active and binding.access == Access.READ_WRITE,
                cursor=outcome.cursor,
            )
    return projections


Recaller = Callable[..., dict[str, Projection]]
# How each provider kind projects its bindings for a recall: all of a kind at once.
RECALLERS: dict[str, Recaller] = {
    ProviderKind.DOCUMENT: _document_projections,
    ProviderKind.HTTP: _http_projections,
}


def _bindings(session: Session) -> list[Binding]:
    return list(session.bindings.select_related("resource").order_by("resource__resource_id"))


def _selected(bindings: list[Binding], use: list[str]) -> list[Binding]:
    by_id = {b.resource.resource_id: b for b in bindings}
    missing = [resource for resource in use if resource not in by_id]
    if missing:
        bound = ", ".join(by_id) or "none"
        raise NotBound(
            f"Not bound to this session: {', '.join(missing)}. Bound resources: {bound}."
        )
    return [by_id[resource] for resource in use]


def _check_use(use: object) -> list[str]:
    if use is None:
        return []
    if not isinstance(use, list) or not all(isinstance(item, str) for item in use):
        raise InvalidRequest("use must be a list of resource ids.")
    return list(dict.fromkeys(use))


def recall_create(*, session: Session, use: object, input_text: str | None = None) -> Result:
    """Recalls every bound resource; any failure blocks the recall and stores nothing.

    `input_text` is what the model request is about; document memory does not
    need it, providers that select context do.
    """
    if not session.is_active:
        raise SessionClosed(f"Session {session.id} has ended; it recalls no memory.")
    selected_ids = _check_use(use)
    bindings = _bindings(session)
    selected = _selected(bindings, selected_ids)
    recall_id = new_recall_id()
    by_kind: dict[str, list[Binding]] = {}
    for binding in bindings:
        if binding.resource.kind not in RECALLERS:
            raise RecallFailed(
                f"No provider can recall '{binding.resource.resource_id}' "
                f"(a {binding.resource.kind} provider).",
                resource=binding.resource.resource_id,
                reason="provider_unavailable",
            )
        by_kind.setdefault(binding.resource.kind, []).append(binding)
    projections: dict[str, Projection] = {}
    # Document memory first: a missing document blocks the recall before any
    # provider is called.
    for kind, recaller in RECALLERS.items():
        if kind in by_kind:
            projections.update(
                recaller(
                    session=session,
                    bindings=by_kind[kind],
                    recall_id=recall_id,
                    input_text=input_text,
                )
            )
    projections = {b.resource.resource_id: projections[b.resource.resource_id] for b in bindings}
    memory = {resource: p.public() for resource, p in projections.items()}
    recall = Recall.objects.create(
        id=recall_id,
        session=session,
        use=selected_ids,
        memory=memory,
        revisions={r: p.revision for r, p in projections.items() if p.revision is not None},
        cursors={r: p.cursor for r, p in projections.items() if p.cursor is not None},
        created_at=timezone.now(),
    )
    return {
        "recallId": recall.id,
        "memory": memory,
        "tools": tool_definitions(session=session, selected=selected),
    }


# Tools: which bindings offer each, its arguments, and what it does.


def _offers_save(binding: Binding) -> bool:
    return binding.scope == Scope.DOCUMENT and binding.access == Access.READ_WRITE


def _offers_collection_tools(binding: Binding) -> bool:
    return binding.scope == Scope.COLLECTION


@dataclass(frozen=True)
class Tool:
    name: str
    summary: str
    offered_by: Callable[[Binding], bool]
    # Argument name -> (JSON type, required, description).
    arguments: dict[str, tuple[str, bool, str]]
    run: Callable[..., Result]


def _declared_descriptions(session: Session) -> dict[str, str]:
    return {d["id"]: d["description"] for d in session.deployment.memory}


def _tool_definition(tool: Tool, eligible: list[Binding], descriptions: dict[str, str]) -> Result:
    names = [b.resource.resource_id for b in eligible]
    listed = "; ".join(
        f"{name}: {descriptions.get(name, '').strip() or 'no description'}" for name in names
    )
    properties: dict[str, Any] = {
        "memory": {
            "type": "string",
            "enum": names,
            "description": "The memory resource to use.",
        }
    }
    required = ["memory"] if len(names) > 1 else []
    for name, (json_type, is_required, description) in tool.arguments.items():
        properties[name] = {"type": json_type, "description": description}
        if is_required:
            required.append(name)
    return {
        "name": tool.name,
        "description": f"{tool.summary} Eligible memory resources: {listed}.",
        "inputSchema": {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
    }


def tool_definitions(*, session: Session, selected: list[Binding]) -> list[Result]:
    """The tools a render that selected these resources offers the model."""
    descriptions = _declared_descriptions(session)
    definitions = []
    for tool in TOOLS.values():
        eligible = [b for b in selected if tool.offered_by(b)]
        if eligible:
            definitions.append(_tool_definition(tool, eligible, descriptions))
    for name, targets in _http_tool_targets(selected).items():
        definitions.append(http_tool_definition(name=name, targets=targets))
    return definitions


def _http_tool_targets(selected: list[Binding]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Provider tools the selected namespace bindings permit, by model-facing name.

    Read tools allow either access level, write tools need read-write; a tool
    the binding's access does not permit is not offered at all.
    """
    targets = [
        (
            binding.resource.resource_id,
            [
                t
                for t in http_tools(binding.resource)
                if tool_permits(tool=t, access=binding.access)
            ],
        )
        for binding in selected
        if binding.scope == Scope.NAMESPACE
    ]
    return http_tools_merge(targets=targets, reserved=TOOLS)


def _rejected(reason: str, **extra: Any) -> Result:
    return {"status": "rejected", "reason": reason, **extra}


def _arguments(tool: Tool, raw: object) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise InvalidToolArguments(f"{tool.name} arguments must be a JSON object.")
    allowed = {"memory", *tool.arguments}
    unknown = set(raw) - allowed
    if unknown:
        raise InvalidToolArguments(
            f"{tool.name} does not take: {', '.join(sorted(unknown))}. "
            f"It takes: {', '.join(sorted(allowed))}."
        )
    for name, (_, required, _) in tool.arguments.items():
        if required and name not in raw:
            raise InvalidToolArguments(f"{tool.name} needs '{name}'.")
    for name, value in raw.items():
        if not isinstance(value, str) and not (name == "cursor" and value is None):
            raise InvalidToolArguments(f"{tool.name}: '{name}' must be a string.")
    return raw


def _target(
    tool: Tool, recall: Recall, bindings: list[Binding], requested: str | None
) -> Binding | Result:
    """The binding a call acts on, or the rejection explaining why there is none."""
    by_id = {b.resource.resource_id: b for b in bindings}
    selected = [by_id[resource] for resource in recall.use if resource in by_id]
    eligible = [b for b in selected if tool.offered_by(b)]
    bound = [b.resource.resource_id for b in eligible]
    if requested is None:
        if len(eligible) == 1:
            return eligible[0]
        if len(eligible) > 1:
            raise InvalidToolArguments(
                f"{tool.name} needs 'memory': more than one resource offers it "
                f"({', '.join(bound)})."
            )
        if len(selected) != 1:
            return _rejected("not_bound", bound=bound)
        requested = selected[0].resource.resource_id
    chosen = next((b for b in selected if b.resource.resource_id == requested), None)
    if chosen is None:
        return _rejected("not_bound", bound=bound)
    if not tool.offered_by(chosen):
        # A document bound read-only could have been saved with read-write access.
        if tool.name == "memory_save" and chosen.scope == Scope.DOCUMENT:
            return _rejected("read_only", bound=bound)
        return _rejected("not_bound", bound=bound)
    return chosen


def tool_call(
    *, session: Session, recall_id: str, call_id: str, name: str, arguments: object
) -> Result:
    """Runs one memory tool call the model made in the response to a recall."""
    recall = Recall.objects.filter(pk=recall_id, session=session).first()
    if recall is None:
        raise NotFound(f"No recall '{recall_id}' in session {session.id}.")
    if not 1 <= len(call_id) <= CALL_ID_MAX:
        raise InvalidRequest(f"callId must be 1-{CALL_ID_MAX} characters.")
    tool = TOOLS.get(name)
    if tool is None:
        return _http_tool_call(
            session=session, recall=recall, call_id=call_id, name=name, arguments=arguments
        )
    args = _arguments(tool, arguments)
    target = _target(tool, recall, _bindings(session), args.get("memory"))
    if not isinstance(target, Binding):
        return target
    return tool.run(session=session, recall=recall, binding=target, args=args)


def _save(*, session: Session, recall: Recall, binding: Binding, args: dict[str, Any]) -> Result:
    resource = binding.resource
    writer = Writer(kind=WriterKind.AGENT, session_id=session.id)
    with transaction.atomic():
        # The session lock orders this save against session end: an end that
        # committed first is seen here, and an end that comes later waits.
        locked = session_lock(session=session)
        if not locked.is_active:
            return _rejected("session_closed")
        try:
            document = document_replace(
                resource=resource,
                doc_id=binding.target_id,
                expected_revision=recall.revisions.get(resource.resource_id, ""),
                text=args["text"],
                summary=args.get("summary"),
                actor=f"agent:{session.id}",
                writer=writer,
                action="save",
            )
        except AgentWritesDisabled:
            return _rejected("agent_writes_disabled")
        except NotFound:
            return _rejected("not_found")
        except LimitExceeded as exc:
            return _rejected("too_large", field=exc.field, bytes=exc.bytes, maxBytes=exc.max_bytes)
        except PreconditionFailed:
            current = Document.objects.live().filter(resource=resource, doc_id=binding.target_id)
            found = current.first()
            if found is None:
                return _rejected("not_found")
            return {"status": "conflict", "text": found.text, "summary": found.summary}
        event_append(
            session=locked,
            type=EventType.MEMORY_SAVED,
            data={
                "resource": resource.resource_id,
                "documentId": document.doc_id,
                "revision": document.revision,
                "bytes": document.bytes,
            },
        )
    return {"status": "saved", "revision": document.revision, "bytes": document.bytes}


def _read(*, session: Session, recall: Recall, binding: Binding, args: dict[str, Any]) -> Result:
    if not Session.objects.active().filter(pk=session.pk).exists():
        return _rejected("session_closed")
    doc_id = args["id"]
    if not DOCUMENT_ID_RE.fullmatch(doc_id):
        return _rejected("not_found")
    try:
        document = document_get(resource=binding.resource, doc_id=doc_id)
    except NotFound:
        return _rejected("not_found")
    return tool_document_dict(document, include_text=True)


def _list(*, session: Session, recall: Recall, binding: Binding, args: dict[str, Any]) -> Result:
    if not Session.objects.active().filter(pk=session.pk).exists():
        return _rejected("session_closed")
    try:
        rows, next_cursor = document_list(resource=binding.resource, cursor=args.get("cursor"))
    except InvalidRequest:
        return _rejected("invalid_cursor")
    documents = [tool_document_dict(row, include_text=False) for row in rows]
    return {"documents": documents, "nextCursor": next_cursor}


TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            name="memory_save",
            summary=(
                "Replace the text of a bound memory document. Omitting summary keeps it; "
                '"" clears it. The save only succeeds if the document is unchanged since '
                "this request's memory was read; on a conflict the current text and "
                "summary come back: reconcile them in your next step."
            ),
            offered_by=_offers_save,
            arguments={
                "text": ("string", True, "The complete new text of the document."),
                "summary": ("string", False, "A one-line summary of the document."),
            },
            run=_save,
        ),
        Tool(
            name="memory_list",
            summary=(
                "List documents of a memory collection (newest first, without text). "
                "Pass nextCursor back as cursor for the next page; null means no more."
            ),
            offered_by=_offers_collection_tools,
            arguments={"cursor": ("string", False, "nextCursor from the previous page.")},
            run=_list,
        ),
        Tool(
            name="memory_read",
            summary="Read one document of a memory collection in full.",
            offered_by=_offers_collection_tools,
            arguments={"id": ("string", True, "The document id.")},
            run=_read,
        ),
    )
}


def _http_tool_call(
    *, session: Session, recall: Recall, call_id: str, name: str, arguments: object
) -> Result:
    """A provider tool (`memory_<name>`): target, access, then one call to the endpoint."""
    bindings = [b for b in _bindings(session) if b.scope == Scope.NAMESPACE]
    declared = {
        b.resource.resource_id: (b, tool)
        for b in bindings
        for tool in http_tools(b.resource)
        if TOOL_PREFIX + tool["name"] == name
    }
    if not declared:
        known = sorted(
            {*TOOLS, *(TOOL_PREFIX + t["name"] for b in bindings for t in http_tools(b.resource))}
        )
        raise InvalidRequest(f"Unknown tool '{name}'. Memory tools: {', '.join(known)}.")
    if not isinstance(arguments, dict):
        raise InvalidToolArguments(f"{name} arguments must be a JSON object.")
    requested = arguments.get("memory")
    if requested is not None and not isinstance(requested, str):
        raise InvalidToolArguments(f"{name}: 'memory' must be a string.")
    eligible = [
        resource_id
        for resource_id in recall.use
        if resource_id in declared
        and tool_permits(tool=declared[resource_id][1], access=declared[resource_id][0].access)
    ]
    if requested is None:
        if len(eligible) > 1:
            raise InvalidToolArguments(
                f"{name} needs 'memory': more than one resource offers it ({', '.join(eligible)})."
            )
        if not eligible:
            return _rejected("not_bound", bound=eligible)
        requested = eligible[0]
    if requested not in eligible:
        # A wrong target or a write through read access: rejected, never redirected.
        return _rejected("not_bound", bound=eligible)
    if not Session.objects.active().filter(pk=session.pk).exists():
        return _rejected("session_closed")
    binding, tool = declared[requested]
    outcome = provider_tool(
        resource=binding.resource,
        tool=tool,
        partition=binding_partition(session=session, binding=binding),
        access=binding.access,
        operation_id=f"{call_id}:{requested}",
        arguments=arguments,
        cursor=recall.cursors.get(requested),
    )
    payload: Result = outcome.payload
    return payload
