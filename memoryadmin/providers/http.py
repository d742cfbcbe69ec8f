"""The `http` provider kind: your service owns storage and retrieval (spec 000).

Recall sends one request per namespace binding, concurrently within one
shared deadline; tools are the ones the declaration lists, sent as
`memory_<name>` to the model and as one protocol call to the endpoint.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from memoryadmin.agents.bindings import BindingSpec, admit_namespace_only, binding_partition
from memoryadmin.agents.errors import RecallFailed
from memoryadmin.agents.models import (
    Access,
    Binding,
    OperationKind,
    ProviderOperation,
    Recall,
    Session,
)
from memoryadmin.agents.services.operations import operation_record
from memoryadmin.memory.cancellation import current_cancellation
from memoryadmin.memory.models import Project, Resource
from memoryadmin.memory.providers import (
    MemoryProvider,
    OperationCheck,
    Projection,
    Result,
    ToolOffer,
    ToolTarget,
)
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
from memoryadmin.providers.concurrency import Deadline, ProviderCalls
from memoryadmin.providers.declarations import (
    HTTP_KIND,
    http_provider_normalize,
    http_provider_public,
)
from memoryadmin.providers.errors import ProviderFailure
from memoryadmin.providers.partitions import partition_key
from memoryadmin.providers.services.secrets import secret_bindings_check
from memoryadmin.providers.tools import (
    TOOL_PREFIX,
    http_tool_definition,
    http_tools,
    tool_permits,
)

KIND = HTTP_KIND


def http_projections(
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
    calls = ProviderCalls[RecallReply].for_recall(
        project_id=session.project_id,
        resource=requests[0].resource.resource_id,
        count=len(requests),
        deadline=deadline,
    )
    with calls:
        # The caller's cancellation, taken here: the calls run in other threads.
        cancellation = current_cancellation()
        sends = [
            partial(recall_send, request, deadline=deadline, cancellation=cancellation)
            for request in requests
        ]
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
                    reason="cancelled" if exc.reason == "cancelled" else "provider_failed",
                    retryable=exc.retryable,
                ) from exc
            projections[binding.resource.resource_id] = Projection(
                text=outcome.text,
                sources=outcome.sources,
                writable=session.is_active and binding.access == Access.READ_WRITE,
                cursor=outcome.cursor,
            )
    return projections


class HttpProvider(MemoryProvider):
    kind = KIND

    def normalize(self, provider: dict[str, Any], where: str) -> dict[str, Any]:
        return http_provider_normalize(provider, where)

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

    def admit(self, *, spec: BindingSpec, resource: Resource) -> None:
        admit_namespace_only(spec, resource)

    def recall(
        self,
        *,
        session: Session,
        bindings: list[Binding],
        recall_id: str,
        input_text: str | None,
    ) -> dict[str, Projection]:
        return http_projections(
            session=session, bindings=bindings, recall_id=recall_id, input_text=input_text
        )

    def tools(self, *, binding: Binding) -> list[ToolOffer]:
        # Read tools allow either access level, write tools need read-write; a
        # tool the binding's access does not permit is not offered at all.
        return [
            ToolOffer(
                name=TOOL_PREFIX + tool["name"],
                schema=tool["input"],
                permitted=tool_permits(tool=tool, access=binding.access),
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
        if not Session.objects.active().filter(pk=session.pk).exists():
            return {"status": "rejected", "reason": "session_closed"}
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
        kind = _open_operation(target, outcome)
        if kind is not None:
            operation_record(
                session=session,
                binding=binding,
                kind=kind,
                provider_operation=f"{call_id}:{target.resource_id}",
                tool=target.offer.name,
                call_id=call_id,
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
