"""Records of resources whose provider keeps them elsewhere (external providers).

One rule book for every door (API, Memory page, CLI): the resource must be
one whose records live with its provider, the namespace is checked, owner
changes are audited, and whatever the provider does not offer is a clear
400 `not_supported`, never a silent no-op.

Every call to the provider is cancelled when its caller goes away, as a
session's calls are (core/cancellation.py: the door passes a probe of its
caller). A write whose outcome only the provider knows (queued by it, or
cancelled in flight) becomes an operation of the durable store, with what it
was (add, update or delete and the record) and the deployment it ran under.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from memoryadmin.agents.models import (
    OPEN_OPERATION_STATES,
    OperationAction,
    OperationKind,
    ProviderOperation,
    RecordDeleteClaim,
)
from memoryadmin.agents.services.operations import operation_open
from memoryadmin.core.cancellation import TTL_MARGIN_SECONDS, Cancelled, cancellation_scope
from memoryadmin.core.concurrency import Deadline, provider_call
from memoryadmin.core.dbclock import db_after, db_now
from memoryadmin.core.errors import InvalidRequest, PreconditionFailed
from memoryadmin.core.strings import string_check
from memoryadmin.memory.models import ActiveDeployment, Resource
from memoryadmin.memory.providers import NotSupported, ResourceKind, provider_for
from memoryadmin.memory.services.audit import audit_record

Result = dict[str, Any]
NAMESPACE_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")
RECORD_ID_MAX = 128
QUERY_MAX = 1000
SEARCH_LIMIT_MAX = 50
CLAIM_POLL_SECONDS = 0.05
AUDIT_ACTIONS = {
    OperationAction.ADD: "record.create",
    OperationAction.UPDATE: "record.update",
    OperationAction.DELETE: "record.delete",
}


def _provider(resource: Resource) -> ResourceKind:
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


def _call[T](resource: Resource, send: Callable[[], T]) -> T:
    """One operation through the provider, cancelled when the caller goes away, and
    counted against the project's bounds on provider calls (ProviderBusy, 429, beyond
    them): an owner's call holds a request thread as a session's does."""
    with cancellation_scope():
        return provider_call(
            project_id=resource.project_id, deadline=Deadline.after(), call=lambda _: send()
        )


def record_list(
    *, resource: Resource, namespace: str, cursor: str | None = None
) -> tuple[list[Result], str | None]:
    provider, namespace = _provider(resource), check_namespace(namespace)
    return _call(
        resource,
        lambda: provider.records_list(resource=resource, namespace=namespace, cursor=cursor),
    )


def record_search(
    *, resource: Resource, namespace: str, query: str, limit: int = 10
) -> list[Result]:
    if not query.strip() or len(query) > QUERY_MAX:
        raise InvalidRequest(f"q must be 1-{QUERY_MAX} characters.")
    if not 1 <= limit <= SEARCH_LIMIT_MAX:
        raise InvalidRequest(f"limit must be 1-{SEARCH_LIMIT_MAX}.")
    provider, namespace = _provider(resource), check_namespace(namespace)
    return _call(
        resource,
        lambda: provider.records_search(
            resource=resource, namespace=namespace, query=query, limit=limit
        ),
    )


def _declaring_deployment(resource: Resource) -> str:
    """The active deployment that declares the resource now (the revision a write ran under)."""
    active = ActiveDeployment.objects.filter(
        project_id=resource.project_id, environment=resource.environment
    ).values_list("deployment_id", "deployment__memory")
    for deployment_id, memory in active:
        if any(item.get("id") == resource.resource_id for item in memory):
            return str(deployment_id)
    return ""


def _write(
    *,
    resource: Resource,
    namespace: str,
    actor: str,
    action: OperationAction,
    record_id: str = "",
    send: Callable[[], Result],
    seen: str | None = None,
) -> Result:
    """One owner write through the provider, audited (`record.create`, `.update`, `.delete`).

    A write the provider only accepted becomes an open operation of the durable store,
    reconciled in the background; the caller sees `queued` until the provider confirms.
    One cancelled in flight (its caller went away) may or may not have happened: it is
    recorded as an open operation too, for an owner to settle, and the caller gets 409
    `cancelled` naming it. A delete runs under the record's claim (`delete_claimed`): a
    delete of the record accepted already and still open is answered `queued` with that
    operation, and nothing is sent. The whole write, a wait for another caller's claim
    included, is one provider call of the project (`_call`): past its bounds 429 before
    anything is looked at or sent. With `seen` (`record_seen` of the text its person read),
    an update or a delete is sent only while the record still reads so (`_unchanged`),
    under the record's claim: an owner's write at the same moment through this server
    waits for it, then reads the text it wrote.
    """

    def write() -> Result | Cancelled:
        # A conditional update holds the record's claim too, with no open delete to give.
        claim: AbstractContextManager[ProviderOperation | None] = nullcontext()
        if action == OperationAction.DELETE:
            claim = delete_claimed(resource, namespace, record_id)
        elif seen is not None:
            claim = _claimed(resource, namespace, record_id)
        with claim as known:
            return _outcome(
                resource=resource,
                namespace=namespace,
                actor=actor,
                action=action,
                record_id=record_id,
                send=send,
                known=known,
                seen=seen,
            )

    outcome = _call(resource, write)
    # Raised once the operation that keeps the cancelled write is committed.
    if isinstance(outcome, Cancelled):
        raise outcome
    return outcome


def _outcome(
    *,
    resource: Resource,
    namespace: str,
    actor: str,
    action: OperationAction,
    record_id: str,
    send: Callable[[], Result],
    known: ProviderOperation | None,
    seen: str | None = None,
) -> Result | Cancelled:
    """The write's answer, audited, or the Cancelled its caller is to be given (within the
    write's provider call, `_write`)."""

    def opened(kind: str, provider_operation: str) -> str:
        return operation_open(
            resource=resource,
            namespace=namespace,
            principal=actor,
            kind=kind,
            provider_operation=provider_operation,
            deployment_id=_declaring_deployment(resource),
            action=action,
            record_id=record_id,
        ).id

    detail: Result = {"id": record_id} if record_id else {}
    if known is not None:
        result = _queued(known.id, known.provider_operation)
    else:
        if seen is not None:
            _unchanged(resource, namespace, record_id, seen)
        try:
            result = send()
        except Cancelled as exc:
            operation = opened(OperationKind.CANCELLED_WRITE, "")
            _audit(
                resource,
                actor,
                AUDIT_ACTIONS[action],
                namespace,
                {**detail, "status": "cancelled", "operation": operation},
            )
            cancelled = Cancelled(
                f"{exc.message} Whether the provider applied it is unknown: operation "
                f"{operation} keeps it for an owner to settle.",
                details={"operation": operation},
            )
            cancelled.__cause__ = exc
            return cancelled
        if result["status"] == "queued":
            provider_operation = result["operation"]
            operation = opened(OperationKind.ACCEPTED_WRITE, provider_operation)
            result = _queued(operation, provider_operation)
    if action == OperationAction.ADD:
        detail["ids"] = [record["id"] for record in result.get("records", [])]
    _audit(
        resource, actor, AUDIT_ACTIONS[action], namespace, {**detail, "status": result["status"]}
    )
    return result


@contextmanager
def delete_claimed(
    resource: Resource, namespace: str, record_id: str
) -> Iterator[ProviderOperation | None]:
    """The one rule for every delete of a provider's record, whoever asks (an owner, an
    erasure, a containment, a session's model tool): within it the caller holds the
    record's claim (`_claimed`) and is given the record's open delete (`_open_delete`),
    if any. With one, the caller sends nothing and answers with it; with none, it sends
    its delete and records the operation the provider accepted before leaving, so a
    second caller at the same moment waits for the claim and is given that operation.
    Run within a provider call of the project (its bounds count the wait)."""
    with _claimed(resource, namespace, record_id):
        yield _open_delete(resource, namespace, record_id)


def record_seen(text: str) -> str:
    """The fingerprint of a record's text as its reader was shown it (the API's ETag of a
    record, the page's `seen`): a provider keeps no revision of its records, so a write
    based on what was read is conditional on the text alone."""
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _unchanged(resource: Resource, namespace: str, record_id: str, seen: str) -> None:
    """The record read from its provider again, just before a conditional write is sent:
    412 `precondition_failed`, nothing sent, where its text is no longer the one read."""
    current = provider_for(resource.kind).record_get(
        resource=resource, namespace=namespace, record_id=record_id
    )
    if record_seen(current["text"]) != seen:
        raise PreconditionFailed(
            f"Record '{record_id}' changed since it was read (at the provider or by "
            "another person): nothing was sent. Read it again."
        )


@contextmanager
def _claimed(resource: Resource, namespace: str, record_id: str) -> Iterator[None]:
    """The record's claim (`RecordDeleteClaim`, its unique key) held, committed, while
    this caller looks for an open delete, sends one if there is none and records its
    operation; removed after. Another caller of the same record waits for the claim to
    go (polling, `CLAIM_POLL_SECONDS`) and then finds the first's operation. No
    transaction is held over the provider's call (on SQLite that would hold every
    project's writes); a claim older than the call's deadline and its margin is a dead
    process's and is taken over."""
    key = {"resource": resource, "namespace": namespace, "record_id": record_id}
    lasts = settings.MEMORYADMIN_PROVIDER_DEADLINE_SECONDS + TTL_MARGIN_SECONDS
    # Past a claim's whole life another's would have been taken over: a refusal then is
    # no claim's (the record's resource gone), and is raised rather than waited on.
    waits_until = time.monotonic() + lasts + 1
    while True:
        # By the database's clock, as every lease (core/dbclock.py).
        RecordDeleteClaim.objects.filter(**key, claimed_at__lt=db_after(-lasts)).delete()
        try:
            with transaction.atomic():
                claim = RecordDeleteClaim.objects.create(**key, claimed_at=db_now())
            break
        except IntegrityError:
            if time.monotonic() > waits_until:
                raise
            time.sleep(CLAIM_POLL_SECONDS)
    try:
        yield
    finally:
        RecordDeleteClaim.objects.filter(pk=claim.pk).delete()


def _queued(operation: str, provider_operation: str) -> Result:
    return {"status": "queued", "operation": operation, "providerOperation": provider_operation}


def record_create(*, resource: Resource, namespace: str, text: str, actor: str) -> Result:
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest("text is required: a nonempty string.")
    # The string rule before the provider hears of it (the page's form reads the field as
    # it came): a provider would store the NUL, then its answer would repeat it.
    string_check(text, field="text")
    provider, namespace = _provider(resource), check_namespace(namespace)
    return _write(
        resource=resource,
        namespace=namespace,
        actor=actor,
        action=OperationAction.ADD,
        send=lambda: provider.record_create(resource=resource, namespace=namespace, text=text),
    )


def record_get(*, resource: Resource, namespace: str, record_id: str) -> Result:
    provider, namespace = _provider(resource), check_namespace(namespace)
    record_id = _check_record_id(record_id)
    return _call(
        resource,
        lambda: provider.record_get(resource=resource, namespace=namespace, record_id=record_id),
    )


def record_update(
    *,
    resource: Resource,
    namespace: str,
    record_id: str,
    text: str,
    actor: str,
    seen: str | None = None,
) -> Result:
    """With `seen` (`record_seen` of the text read), only while the record still reads so."""
    string_check(text, field="text")
    provider, namespace = _provider(resource), check_namespace(namespace)
    record_id = _check_record_id(record_id)
    return _write(
        resource=resource,
        namespace=namespace,
        actor=actor,
        action=OperationAction.UPDATE,
        record_id=record_id,
        send=lambda: provider.record_update(
            resource=resource, namespace=namespace, record_id=record_id, changes={"text": text}
        ),
        seen=seen,
    )


def record_delete(
    *, resource: Resource, namespace: str, record_id: str, actor: str, seen: str | None = None
) -> Result:
    """Whoever asks (an owner, an erasure, an incident's containment), a record whose delete
    the provider accepted and has not finished is answered with that open operation,
    `queued`: nothing is sent again, also to a caller asking at the very moment the first
    sends it (it waits for the first's operation). With `seen` (an owner's, `record_seen`
    of the text read), only while the record still reads so."""
    provider, namespace = _provider(resource), check_namespace(namespace)
    record_id = _check_record_id(record_id)
    return _write(
        resource=resource,
        namespace=namespace,
        actor=actor,
        action=OperationAction.DELETE,
        record_id=record_id,
        send=lambda: provider.record_delete(
            resource=resource, namespace=namespace, record_id=record_id
        ),
        seen=seen,
    )


def _open_delete(resource: Resource, namespace: str, record_id: str) -> ProviderOperation | None:
    """The open delete of this record the provider accepted (an owner's, an erasure's, a
    containment's or a session's), if any. A delete cancelled in flight or whose answer was
    lost is not one: no provider operation will finish it, so a new delete is sent."""
    return (
        ProviderOperation.objects.filter(
            resource=resource,
            namespace=namespace,
            record_id=record_id,
            action=OperationAction.DELETE,
            kind=OperationKind.ACCEPTED_WRITE,
            state__in=OPEN_OPERATION_STATES,
        )
        .order_by("created_at", "id")
        .first()
    )


def record_history(*, resource: Resource, namespace: str, record_id: str) -> list[Result]:
    provider, namespace = _provider(resource), check_namespace(namespace)
    record_id = _check_record_id(record_id)
    return _call(
        resource,
        lambda: provider.record_history(
            resource=resource, namespace=namespace, record_id=record_id
        ),
    )
