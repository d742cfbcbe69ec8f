"""Records of resources whose provider keeps them elsewhere (external providers).

One rule book for every door (API, Memory page, CLI): the resource must be
one whose records live with its provider, the namespace is checked, owner
changes are audited, and whatever the provider does not offer is a clear
400 `not_supported`, never a silent no-op.
"""

from __future__ import annotations

import re
from typing import Any

from memoryadmin.agents.models import OperationKind
from memoryadmin.agents.services.operations import operation_open
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.memory.models import ActiveDeployment, Resource
from memoryadmin.memory.providers import MemoryProvider, NotSupported, provider_for
from memoryadmin.memory.services.audit import audit_record

Result = dict[str, Any]
NAMESPACE_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")
RECORD_ID_MAX = 128
QUERY_MAX = 1000
SEARCH_LIMIT_MAX = 50


def _provider(resource: Resource) -> MemoryProvider:
    if resource.keeps_documents:
        raise NotSupported(
            f"Resource '{resource.resource_id}' keeps documents here; use its documents."
        )
    return provider_for(resource.kind)


def check_namespace(value: object) -> str:
    if not isinstance(value, str) or not NAMESPACE_RE.fullmatch(value):
        raise InvalidRequest(
            "namespace is required: 1-128 letters, digits, hyphens or underscores."
        )
    return value


def _check_record_id(value: str) -> str:
    if not value or len(value) > RECORD_ID_MAX:
        raise InvalidRequest(f"Record ids are 1-{RECORD_ID_MAX} characters.")
    return value


def _audit(resource: Resource, actor: str, action: str, namespace: str, detail: Result) -> None:
    audit_record(
        project_id=resource.project_id,
        environment=resource.environment,
        actor=actor,
        action=action,
        resource_id=resource.resource_id,
        detail={"namespace": namespace, **detail},
    )


def record_list(
    *, resource: Resource, namespace: str, cursor: str | None = None
) -> tuple[list[Result], str | None]:
    return _provider(resource).records_list(
        resource=resource, namespace=check_namespace(namespace), cursor=cursor
    )


def record_search(
    *, resource: Resource, namespace: str, query: str, limit: int = 10
) -> list[Result]:
    if not query.strip() or len(query) > QUERY_MAX:
        raise InvalidRequest(f"q must be 1-{QUERY_MAX} characters.")
    if not 1 <= limit <= SEARCH_LIMIT_MAX:
        raise InvalidRequest(f"limit must be 1-{SEARCH_LIMIT_MAX}.")
    return _provider(resource).records_search(
        resource=resource, namespace=check_namespace(namespace), query=query, limit=limit
    )


def _queued(resource: Resource, namespace: str, actor: str, result: Result) -> Result:
    """A write the provider only accepted becomes an open operation of the durable store,
    reconciled in the background; the caller sees `queued` until the provider confirms."""
    if result["status"] != "queued":
        return result
    operation = operation_open(
        resource=resource,
        namespace=namespace,
        principal=actor,
        kind=OperationKind.ACCEPTED_WRITE,
        provider_operation=result["operation"],
        deployment_id=_declaring_deployment(resource),
    )
    return {"status": "queued", "operation": operation.id, "providerOperation": result["operation"]}


def _declaring_deployment(resource: Resource) -> str:
    """The active deployment that declares the resource now (the revision a write ran under)."""
    active = ActiveDeployment.objects.filter(
        project_id=resource.project_id, environment=resource.environment
    ).values_list("deployment_id", "deployment__memory")
    for deployment_id, memory in active:
        if any(item.get("id") == resource.resource_id for item in memory):
            return str(deployment_id)
    return ""


def record_create(*, resource: Resource, namespace: str, text: str, actor: str) -> Result:
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest("text is required: a nonempty string.")
    provider = _provider(resource)
    result = provider.record_create(
        resource=resource, namespace=check_namespace(namespace), text=text
    )
    result = _queued(resource, namespace, actor, result)
    ids = [record["id"] for record in result.get("records", [])]
    _audit(resource, actor, "record.create", namespace, {"status": result["status"], "ids": ids})
    return result


def record_get(*, resource: Resource, namespace: str, record_id: str) -> Result:
    return _provider(resource).record_get(
        resource=resource,
        namespace=check_namespace(namespace),
        record_id=_check_record_id(record_id),
    )


def record_update(
    *, resource: Resource, namespace: str, record_id: str, text: str, actor: str
) -> Result:
    provider = _provider(resource)
    result = provider.record_update(
        resource=resource,
        namespace=check_namespace(namespace),
        record_id=_check_record_id(record_id),
        changes={"text": text},
    )
    result = _queued(resource, namespace, actor, result)
    _audit(
        resource, actor, "record.update", namespace, {"id": record_id, "status": result["status"]}
    )
    return result


def record_delete(*, resource: Resource, namespace: str, record_id: str, actor: str) -> Result:
    provider = _provider(resource)
    result = provider.record_delete(
        resource=resource,
        namespace=check_namespace(namespace),
        record_id=_check_record_id(record_id),
    )
    result = _queued(resource, namespace, actor, result)
    _audit(
        resource, actor, "record.delete", namespace, {"id": record_id, "status": result["status"]}
    )
    return result


def record_history(*, resource: Resource, namespace: str, record_id: str) -> list[Result]:
    return _provider(resource).record_history(
        resource=resource,
        namespace=check_namespace(namespace),
        record_id=_check_record_id(record_id),
    )
