"""The `http` provider kind: your service owns storage and retrieval (spec 000).

Recall prepares one request per namespace binding, which the runtime sends
together with every other bound provider's call, within the recall's one
deadline; tools are the ones the declaration lists, sent as `memory_<name>`
to the model and as one protocol call to the endpoint.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from memoryadmin.agents.bindings import BindingSpec, admit_namespace_only, binding_partition
from memoryadmin.agents.errors import RecallFailed
from memoryadmin.agents.kinds import (
    MemoryProvider,
    OperationCheck,
    Projection,
    RecallCall,
    Result,
    ToolOffer,
    ToolTarget,
)
from memoryadmin.agents.models import (
    Binding,
    OperationKind,
    ProviderOperation,
    Recall,
    Session,
)
from memoryadmin.agents.services.operations import operation_record
from memoryadmin.agents.services.sessions import record_saved
from memoryadmin.core.cancellation import current_cancellation
from memoryadmin.core.concurrency import Deadline
from memoryadmin.core.partitions import partition_key
from memoryadmin.core.tools import TOOL_PREFIX, http_tool_definition
from memoryadmin.memory.models import Project, Resource
from memoryadmin.providers.client import (
    RecallReply,
    RecallRequest,
    ToolOutcome,
    provider_status,
    provider_tool,
    recall_outcome,
    recall_request,
    recall_send,
)
from memoryadmin.providers.declarations import (
    HTTP_KIND,
    http_provider_normalize,
    http_provider_public,
)
from memoryadmin.providers.errors import ProviderFailure
from memoryadmin.providers.services.secrets import secret_bindings_check
from memoryadmin.providers.tools import http_tools

KIND = HTTP_KIND


def http_recall_calls(
    *,
    session: Session,
    bindings: list[Binding],
    recall_id: str,
    input_text: str | None,
    deadline: Deadline,
) -> list[RecallCall[Any]]:
    """One protocol request per namespace binding, each carrying the recall's deadline."""
    # The caller's cancellation, taken here: the calls run in other threads.
    cancellation = current_cancellation()
    calls: list[RecallCall[Any]] = []
    for binding in bindings:
        resource_id = binding.resource.resource_id
        try:
            request = recall_request(
                resource=binding.resource,
                partition=binding_partition(session=session, binding=binding),
                access=binding.access,
                operation_id=f"{recall_id}:{resource_id}",
                input_text=input_text,
                deadline=deadline,
            )
        except ProviderFailure as exc:
            raise _recall_failed(resource_id, exc) from exc
        calls.append(
            RecallCall(
                send=partial(recall_send, request, deadline=deadline, cancellation=cancellation),
                projection=partial(_projection, request),
            )
        )
    return calls


def _projection(request: RecallRequest, sent: RecallReply) -> Projection:
    try:
        outcome = recall_outcome(request, sent)
    except ProviderFailure as exc:
        # Never substitute empty memory: the whole recall fails. The caller learns
        # only that it failed and whether to retry; the details are in the server
        # log and the audit log.
        raise _recall_failed(request.resource.resource_id, exc) from exc
    return Projection(text=outcome.text, sources=outcome.sources, cursor=outcome.cursor)


def _recall_failed(resource_id: str, exc: ProviderFailure) -> RecallFailed:
    return RecallFailed(
        exc.message, resource=resource_id, reason="provider_failed", retryable=exc.retryable
    )


class HttpProvider(MemoryProvider):
    kind = KIND

    def normalize(self, provider: dict[str, Any], where: str, *, project: str) -> dict[str, Any]:
        return http_provider_normalize(provider, where, project=project)

    def promote_check(
        self, *, project: Project, environment: str, provider: dict[str, Any], where: str
    ) -> None:
        secret_bindings_check(
            project=project, environment=environment, provider=provider, where=where
        )

    def public(self, provider: dict[str, Any]) -> dict[str, Any]:
        return http_provider_public(provider)

    def declared_tools(self, resource: Resource) -> list[dict[str, Any]]:
        return http_tools(resource)

    def admit(self, *, bindings: list[tuple[BindingSpec, Resource]]) -> None:
        admit_namespace_only(bindings)

    def recall_calls(
        self,
        *,
        session: Session,
        bindings: list[Binding],
        recall_id: str,
        input_text: str | None,
        deadline: Deadline,
    ) -> list[RecallCall[Any]]:
        return http_recall_calls(
            session=session,
            bindings=bindings,
            recall_id=recall_id,
            input_text=input_text,
            deadline=deadline,
        )

    def tools(self, *, binding: Binding) -> list[ToolOffer]:
        return [
            ToolOffer(
                name=TOOL_PREFIX + tool["name"],
                schema=tool["input"],
                writes=tool["access"] == "write",
                spec=tool,
            )
            for tool in http_tools(binding.resource)
        ]

    def tool_definition(self, *, name: str, targets: list[ToolTarget]) -> Result:
        return http_tool_definition(
            name=name, targets=[(target.resource_id, target.offer.spec) for target in targets]
        )

    def tool_execute(
        self,
        *,
        session: Session,
        recall: Recall,
        target: ToolTarget,
        call_id: str,
        arguments: dict[str, Any],
    ) -> Result:
        binding = target.binding
        outcome = provider_tool(
            resource=binding.resource,
            tool=target.offer.spec,
            partition=binding_partition(session=session, binding=binding),
            access=binding.access,
            operation_id=f"{call_id}:{target.resource_id}",
            arguments=arguments,
            cursor=recall.cursors.get(target.resource_id),
        )
        payload: Result = outcome.payload
        named = payload.get("id") if isinstance(payload, dict) else None
        record_id = named if isinstance(named, str) else ""
        kind = _open_operation(target, outcome)
        if kind is not None:
            # Its `record.saved` is the operation store's to write, when it succeeds.
            operation_record(
                session=session,
                binding=binding,
                kind=kind,
                provider_operation=f"{call_id}:{target.resource_id}",
                tool=target.offer.name,
                call_id=call_id,
                recall_id=recall.id,
                record_id=record_id,
            )
        elif target.offer.spec["access"] == "write" and outcome.kind == "result":
            record_saved(
                session=session,
                resource=target.resource_id,
                namespace=binding.target_id,
                tool=target.offer.name,
                call_id=call_id,
                recall_id=recall.id,
                record_ids=[record_id] if record_id else [],
            )
        return payload

    def operation_check(self, *, operation: ProviderOperation) -> OperationCheck:
        state, word = provider_status(
            resource=operation.resource,
            partition=partition_key(
                project_id=operation.project_id,
                environment=operation.environment,
                resource_id=operation.resource.resource_id,
                namespace=operation.namespace,
            ),
            operation_id=operation.provider_operation,
        )
        return OperationCheck(state=state, detail=f"the provider answered {word}")


def _open_operation(target: ToolTarget, outcome: ToolOutcome) -> str | None:
    """The kind of operation a write's outcome leaves open, if any."""
    tool = target.offer.spec
    if tool["access"] != "write":
        return None
    if outcome.kind == "uncertain":
        return OperationKind.UNCERTAIN_WRITE
    if outcome.kind == "cancelled" and outcome.attempts > 0 and not tool.get("idempotent"):
        # Sent, then cancelled: it may have committed; only the provider can tell.
        return OperationKind.CANCELLED_WRITE
    payload = outcome.payload
    if (
        outcome.kind == "result"
        and isinstance(payload, dict)
        and payload.get("status") == "accepted"
    ):
        return OperationKind.ACCEPTED_WRITE
    return None
