"""The `document` provider kind: editable documents kept here, the core of the product.

Recall reads every bound document (remembering its revision) or a
collection's overview; `memory_save` replaces a document only if that
revision is still current; `memory_list` / `memory_read` page a collection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from django.db import transaction

from memoryadmin.agents import search_tool
from memoryadmin.agents.bindings import BindingSpec
from memoryadmin.agents.errors import InvalidMemoryBinding, InvalidToolArguments, RecallFailed
from memoryadmin.agents.kinds import (
    MemoryProvider,
    Projection,
    Result,
    ToolOffer,
    ToolTarget,
)
from memoryadmin.agents.models import Binding, EventType, Recall, Scope, Session
from memoryadmin.agents.representations import source_dict, tool_document_dict
from memoryadmin.agents.services.provenance import tool_sources_store
from memoryadmin.agents.services.sessions import event_append, session_lock
from memoryadmin.core.errors import InvalidRequest, LimitExceeded, NotFound, PreconditionFailed
from memoryadmin.core.rows import Compiled, column, columns_of, fetch_rows, table, values_of
from memoryadmin.memory.limits import (
    DOCUMENT_ID_RE,
    MAX_BYTES_DEFAULT,
    MAX_BYTES_MAX,
    OVERVIEW_MAX_BYTES,
    OVERVIEW_MAX_ENTRIES,
    check_max_bytes,
    utf8_len,
)
from memoryadmin.memory.models import Document, Proposal, Resource, WriterKind
from memoryadmin.memory.representations import DOCUMENT_FIELDS
from memoryadmin.memory.services.documents import (
    AgentWritesDisabled,
    Writer,
    document_get,
    document_list,
)
from memoryadmin.memory.services.proposals import document_agent_save

KIND = "document"
REVIEW_PREFIXES_MAX = 20


def rejected(reason: str, **extra: Any) -> Result:
    return {"status": "rejected", "reason": reason, **extra}


# Recall.


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


def _bound_documents(bindings: list[Binding]) -> dict[tuple[int, str], dict[str, Any]]:
    """The live documents of document bindings (their DOCUMENT_FIELDS by name), read in
    one query."""
    wanted = [b for b in bindings if b.scope == Scope.DOCUMENT]
    if not wanted:
        return {}
    if all(hasattr(b, "bound_document") for b in wanted):  # read with the session
        return {
            (b.resource_id, b.target_id): b.bound_document
            for b in wanted
            if b.bound_document is not None
        }
    key = f"({column(Document, 'resource')} = %s AND {column(Document, 'doc_id')} = %s)"
    sql = (
        f"SELECT {column(Document, 'resource')}, {columns_of(Document, DOCUMENT_FIELDS)}"
        f" FROM {table(Document)}"
        f" WHERE NOT {column(Document, 'deleted')} AND ({' OR '.join([key] * len(wanted))})"
    )
    rows = fetch_rows(sql, [v for b in wanted for v in (b.resource_id, b.target_id)])
    found = {}
    for resource_pk, *values in rows:
        document = values_of(Document, DOCUMENT_FIELDS, values)
        found[(resource_pk, document["doc_id"])] = document
    return found


def document_projections(*, bindings: list[Binding]) -> dict[str, Projection]:
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
        projections[resource_id] = Projection(
            text=found["text"],
            sources=[source_dict(found)],
            writable=found["agent_writes"],
            revision=found["revision"],
        )
    return projections


# Tools.


def _offers_save(binding: Binding) -> bool:
    return binding.scope == Scope.DOCUMENT


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
    # Whether it changes memory (the runtime permits it through read-write bindings only).
    writes: bool = False
    # Why a call naming a binding without that access is refused.
    refusal: str = "not_bound"

    def schema(self) -> dict[str, Any]:
        return {name: list(spec[:2]) for name, spec in self.arguments.items()}


def _tool_definition(tool: Tool, targets: list[ToolTarget]) -> Result:
    descriptions = {d["id"]: d["description"] for d in targets[0].binding.session.deployment.memory}
    names = [target.resource_id for target in targets]
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
        # One full stop at the end, whether or not the last description brings its own.
        "description": f"{tool.summary} Eligible memory resources: {listed.rstrip('.')}.",
        "inputSchema": {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
    }


def _arguments(tool: Tool, raw: dict[str, Any]) -> None:
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
        json_type = tool.arguments[name][0] if name in tool.arguments else "string"
        if json_type == "integer":
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidToolArguments(f"{tool.name}: '{name}' must be an integer.")
        elif not isinstance(value, str) and not (name == "cursor" and value is None):
            raise InvalidToolArguments(f"{tool.name}: '{name}' must be a string.")


def _save(
    *, session: Session, recall: Recall, binding: Binding, args: dict[str, Any], call_id: str
) -> Result:
    resource = binding.resource
    writer = Writer(
        kind=WriterKind.AGENT, session_id=session.id, recall_id=recall.id, call_id=call_id
    )
    # The save is no savepoint of this transaction (it adds none): a save that raises
    # has written nothing, and the transaction is rolled back as it ends.
    with transaction.atomic():
        # The runtime refused calls of an ended session; the session lock orders
        # this save against an end that commits meanwhile: an end that committed
        # first is seen here, and an end that comes later waits.
        locked = session_lock(session=session)
        if not locked.is_active:
            return rejected("session_closed")
        try:
            # Under review this records a proposal and leaves the document as it is.
            document = document_agent_save(
                resource=resource,
                doc_id=binding.target_id,
                expected_revision=recall.revisions.get(resource.resource_id, ""),
                text=args["text"],
                summary=args.get("summary"),
                writer=writer,
                agent=session.agent,
            )
        except AgentWritesDisabled:
            return rejected("agent_writes_disabled")
        except NotFound:
            return rejected("not_found")
        except LimitExceeded as exc:
            return rejected("too_large", field=exc.field, bytes=exc.bytes, maxBytes=exc.max_bytes)
        except PreconditionFailed:
            document = None
        if isinstance(document, Proposal):
            return {"status": "proposed", "proposalId": document.id}
        if document is not None:
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
    if document is None:
        # The revision the agent read is no longer current (read after the rollback).
        current = Document.objects.live().filter(resource=resource, doc_id=binding.target_id)
        found = current.first()
        if found is None:
            return rejected("not_found")
        return {"status": "conflict", "text": found.text, "summary": found.summary}
    return {"status": "saved", "revision": document.revision, "bytes": document.bytes}


def _read(
    *, session: Session, recall: Recall, binding: Binding, args: dict[str, Any], **_: str
) -> Result:
    doc_id = args["id"]
    if not DOCUMENT_ID_RE.fullmatch(doc_id):
        return rejected("not_found")
    try:
        document = document_get(resource=binding.resource, doc_id=doc_id)
    except NotFound:
        return rejected("not_found")
    tool_sources_store(recall=recall, binding=binding, shown=[(doc_id, document.revision)])
    return tool_document_dict(document, include_text=True)


def _list(
    *, session: Session, recall: Recall, binding: Binding, args: dict[str, Any], **_: str
) -> Result:
    try:
        rows, next_cursor = document_list(resource=binding.resource, cursor=args.get("cursor"))
    except InvalidRequest:
        return rejected("invalid_cursor")
    documents = [tool_document_dict(row, include_text=False) for row in rows]
    shown = [(document["id"], document["revision"]) for document in documents]
    tool_sources_store(recall=recall, binding=binding, shown=shown)
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
            writes=True,
            # A document bound read-only could have been saved with read-write access.
            refusal="read_only",
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
        Tool(
            name=search_tool.SEARCH_TOOL,
            summary=search_tool.SUMMARY,
            offered_by=search_tool.offers_search,
            arguments=search_tool.ARGUMENTS,
            run=search_tool.search_run,
        ),
    )
}


def _review_policy(raw: object, where: str) -> dict[str, Any]:
    """Which agent writes review catches: changes over N bytes, ids with a prefix."""
    if not isinstance(raw, dict) or set(raw) - {"overBytes", "idPrefixes"}:
        raise InvalidRequest(f"{where} must be an object with overBytes and/or idPrefixes.")
    policy: dict[str, Any] = {}
    if "overBytes" in raw:
        over = raw["overBytes"]
        if not isinstance(over, int) or isinstance(over, bool) or not 0 <= over <= MAX_BYTES_MAX:
            raise InvalidRequest(f"{where}.overBytes must be an integer 0-{MAX_BYTES_MAX}.")
        policy["overBytes"] = over
    if "idPrefixes" in raw:
        prefixes = raw["idPrefixes"]
        if (
            not isinstance(prefixes, list)
            or not 1 <= len(prefixes) <= REVIEW_PREFIXES_MAX
            or not all(isinstance(p, str) and DOCUMENT_ID_RE.fullmatch(p) for p in prefixes)
        ):
            raise InvalidRequest(
                f"{where}.idPrefixes must be 1-{REVIEW_PREFIXES_MAX} document id prefixes."
            )
        policy["idPrefixes"] = sorted(set(prefixes))
    if not policy:
        raise InvalidRequest(f"{where} needs overBytes, idPrefixes or both.")
    return policy


def _review_settings(provider: dict[str, Any], where: str) -> dict[str, Any]:
    """A resource's default write mode for agents (`review` or the default `enabled`) and
    the policy that narrows review."""
    agent_writes = provider.get("agentWrites", "enabled")
    if agent_writes not in ("enabled", "review"):
        raise InvalidRequest(f"{where}.provider.agentWrites must be 'enabled' or 'review'.")
    if agent_writes != "review":
        if "reviewPolicy" in provider:
            raise InvalidRequest(f"{where}.provider.reviewPolicy needs agentWrites 'review'.")
        return {}
    settings: dict[str, Any] = {"agentWrites": "review"}
    if "reviewPolicy" in provider:
        settings["reviewPolicy"] = _review_policy(
            provider["reviewPolicy"], f"{where}.provider.reviewPolicy"
        )
    return settings


# Whether each of these documents exists and was deleted (a superset: each resource's ids).
_DOCUMENT_STATES = Compiled(
    lambda resource_pks, doc_ids: Document.objects.filter(
        resource_id__in=resource_pks, doc_id__in=doc_ids
    ).values_list("resource_id", "doc_id", "deleted"),
    (list[int], list[str]),
)


class DocumentProvider(MemoryProvider):
    kind = KIND
    keeps_documents = True
    recalls_here = True
    # memory_search is not reserved: only collections bound with search offer it,
    # and an http provider may declare a tool of that name for other sessions.
    reserved_tools = tuple(name for name in TOOLS if name != search_tool.SEARCH_TOOL)

    def normalize(self, provider: dict[str, Any], where: str, *, project: str) -> dict[str, Any]:
        unknown = set(provider) - {"kind", "maxBytes", "agentWrites", "reviewPolicy"}
        if unknown:
            raise InvalidRequest(
                f"{where}.provider has unknown fields: {', '.join(sorted(unknown))}."
            )
        max_bytes = provider.get("maxBytes", MAX_BYTES_DEFAULT)
        try:
            check_max_bytes(max_bytes)
        except InvalidRequest as exc:
            raise InvalidRequest(f"{where}.provider.{exc.message}") from exc
        return {"kind": KIND, "maxBytes": max_bytes, **_review_settings(provider, where)}

    def admit(self, *, bindings: list[tuple[BindingSpec, Resource]]) -> None:
        for spec, _ in bindings:
            if spec.scope == Scope.NAMESPACE:
                raise InvalidMemoryBinding(
                    spec.resource,
                    "namespace bindings need an http provider; this is a document one.",
                )
        documents = [(spec, where) for spec, where in bindings if spec.scope == Scope.DOCUMENT]
        if not documents:
            return
        # Every bound document's state in one query (a superset: each resource's ids).
        deleted = {
            (resource_id, doc_id): state
            for resource_id, doc_id, state in _DOCUMENT_STATES.rows(
                {resource.pk for _, resource in documents},
                {spec.target_id for spec, _ in documents},
            )
        }
        for spec, resource in documents:
            state = deleted.get((resource.pk, spec.target_id))
            if state is None:
                raise InvalidMemoryBinding(
                    spec.resource, f"document '{spec.target_id}' does not exist; create it first."
                )
            if state:
                raise InvalidMemoryBinding(
                    spec.resource, f"document '{spec.target_id}' was deleted; use a new id."
                )

    def recall(self, *, session: Session, bindings: list[Binding]) -> dict[str, Projection]:
        return document_projections(bindings=bindings)

    def tools(self, *, binding: Binding) -> list[ToolOffer]:
        return [
            ToolOffer(
                name=tool.name,
                schema=tool.schema(),
                writes=tool.writes,
                refusal=tool.refusal,
                spec=tool,
            )
            for tool in TOOLS.values()
            if tool.offered_by(binding)
        ]

    def tool_definition(self, *, name: str, targets: list[ToolTarget]) -> Result:
        return _tool_definition(TOOLS[name], targets)

    def tool_check(self, *, name: str, arguments: dict[str, Any]) -> None:
        _arguments(TOOLS[name], arguments)

    def tool_execute(
        self,
        *,
        session: Session,
        recall: Recall,
        target: ToolTarget,
        call_id: str,
        arguments: dict[str, Any],
    ) -> Result:
        tool: Tool = target.offer.spec
        return tool.run(
            session=session,
            recall=recall,
            binding=target.binding,
            args=arguments,
            call_id=call_id,
        )
