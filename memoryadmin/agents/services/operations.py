"""The durable operation store: asynchronous provider operations, reconciled to where they end.

An operation is recorded in the transaction that learned of it, together with
the runner job that reconciles it (`operation_reconcile`, a job kind). Each
attempt of the job asks the provider once (through its kind's
`operation_check`); while the provider reports no terminal state the job
raises RetryAfter, and the runner checks again after a growing pause. Callers
see `queued` or `partial` until then. When the job dies (its attempts, or its
deadline, ran out) the operation becomes a dead letter: never taken for a
success. Owners retry (the job runs again from the start) or discard dead
letters; both are audited. The operation row is the record; its checks, their
deadline and the next one are its job's.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from memoryadmin.agents.kinds import OperationCheck, provider_for, provider_kinds
from memoryadmin.agents.models import (
    OPEN_OPERATION_STATES,
    SETTLED_OPERATION_STATES,
    Binding,
    OperationAction,
    OperationKind,
    OperationState,
    ProviderOperation,
    Session,
)
from memoryadmin.agents.services.sessions import record_saved
from memoryadmin.core.cursors import keyset_page
from memoryadmin.core.environments import check_environment
from memoryadmin.core.errors import Conflict, InvalidRequest, NotFound
from memoryadmin.memory.models import Project, Resource
from memoryadmin.memory.representations import iso_ms
from memoryadmin.memory.services.audit import audit_record
from memoryadmin.runner.jobs import (
    RetryAfter,
    current_claim,
    durable,
    enqueue,
    enqueue_dead,
    job_again,
    job_discard,
)
from memoryadmin.runner.models import Job

OPERATION_PAGE_SIZE = 50
ERROR_MAX = 1000
AUDIT_ACTOR = "system:operations"
# `state=` filters: each state, and `open` for queued and partial together.
STATE_FILTERS: dict[str, list[str]] = {
    "open": list(OPEN_OPERATION_STATES),
    **{state: [state] for state in OperationState.values},
}


def _now() -> datetime:
    return timezone.now()


def _schedule(operation_id: str, project_id: str) -> Job:
    return enqueue(operation_reconcile, project=project_id, operation_id=operation_id)


def operation_record(
    *,
    session: Session,
    binding: Binding,
    kind: str,
    provider_operation: str,
    tool: str = "",
    call_id: str = "",
    recall_id: str = "",
    action: str = "",
    record_id: str = "",
) -> ProviderOperation:
    """Records an open operation of a session's binding and schedules its reconciliation:
    a write of the session's model tool (`tool`, `call_id`, the recall it answered)."""
    return operation_open(
        resource=binding.resource,
        namespace=binding.target_id,
        session=session,
        principal=f"session:{session.id} agent:{session.agent}",
        deployment_id=session.deployment_id,
        kind=kind,
        provider_operation=provider_operation,
        tool=tool,
        call_id=call_id,
        recall_id=recall_id,
        action=action,
        record_id=record_id,
    )


def operation_open(
    *,
    resource: Resource,
    namespace: str,
    principal: str,
    kind: str,
    provider_operation: str,
    session: Session | None = None,
    deployment_id: str = "",
    tool: str = "",
    call_id: str = "",
    recall_id: str = "",
    action: str = "",
    record_id: str = "",
) -> ProviderOperation:
    """Records an open operation on a resource's records (a session's write, or an owner's
    write of records that live with the provider, `principal` naming who) with what it was
    (`action`, `tool`, `record_id`) and the deployment it ran under, and schedules its
    reconciliation, in the caller's transaction."""
    now = _now()
    with transaction.atomic():
        return _create(
            resource,
            now,
            job_of=lambda operation_id: _schedule(operation_id, resource.project_id),
            namespace=namespace,
            session=session,
            principal=principal,
            deployment_id=deployment_id,
            kind=kind,
            provider_operation=provider_operation,
            action=action,
            tool=tool,
            call_id=call_id,
            recall_id=recall_id,
            record_id=record_id,
        )


def _create(
    resource: Resource, now: datetime, *, job_of: Callable[[str], Job], **fields: Any
) -> ProviderOperation:
    """A new operation and its job (`job_of` its id)."""
    operation_id = "mop_" + secrets.token_hex(12)
    return ProviderOperation.objects.create(
        id=operation_id,
        project_id=resource.project_id,
        environment=resource.environment,
        resource=resource,
        job=job_of(operation_id),
        created_at=now,
        updated_at=now,
        **fields,
    )


def operation_dead_letter(
    *,
    resource: Resource,
    namespace: str,
    principal: str,
    kind: str,
    action: str,
    record_id: str,
    error: str,
) -> ProviderOperation:
    """A write that failed for good where it must not be forgotten (an incident's undo of a
    record): a dead letter at once, audited, for an owner to settle. The same write failing
    again keeps its one dead letter (with the newer error)."""
    now = _now()
    with transaction.atomic():
        known = (
            ProviderOperation.objects.select_for_update()
            .filter(
                resource=resource,
                namespace=namespace,
                kind=kind,
                action=action,
                record_id=record_id,
                state=OperationState.DEAD,
            )
            .first()
        )
        if known is not None:
            known.last_error, known.updated_at = error[:ERROR_MAX], now
            known.save(update_fields=["last_error", "updated_at"])
            return known
        operation = _create(
            resource,
            now,
            # Its one attempt spent: a dead job from the start.
            job_of=lambda operation_id: enqueue_dead(
                operation_reconcile,
                project=resource.project_id,
                error=error[:ERROR_MAX],
                operation_id=operation_id,
            ),
            namespace=namespace,
            principal=principal,
            kind=kind,
            action=action,
            record_id=record_id,
            state=OperationState.DEAD,
            last_error=error[:ERROR_MAX],
            finished_at=now,
        )
        _audit(operation, "operation.dead_letter", principal, error=error[:ERROR_MAX])
    return operation


def _dead_letter(job: Job) -> None:
    """The job's checks ran out (attempts or deadline): the operation is a dead letter."""
    operation = (
        ProviderOperation.objects.select_related("resource")
        .filter(job_id=job.pk, state__in=OPEN_OPERATION_STATES)
        .first()
    )
    if operation is None:
        return
    now = _now()
    ProviderOperation.objects.filter(pk=operation.pk).update(
        state=OperationState.DEAD, finished_at=now, updated_at=now
    )
    operation.job = job
    _audit(operation, "operation.dead_letter", AUDIT_ACTOR, error=operation.last_error)


@durable(
    max_attempts=lambda: int(settings.MEMORYADMIN_OPERATION_MAX_ATTEMPTS),
    atomic=False,
    backoff=lambda: float(settings.MEMORYADMIN_OPERATION_BACKOFF_SECONDS),
    deadline=lambda: float(settings.MEMORYADMIN_OPERATION_DEADLINE_SECONDS),
    on_dead=_dead_letter,
)
def operation_reconcile(*, operation_id: str) -> None:
    """One check of one open operation; RetryAfter while it stays open.

    Safe to run twice: a check of an operation that is no longer open does nothing, and
    one whose attempt no longer holds its job (its lease passed and another worker took
    the job over) writes nothing over what the later attempt recorded.
    """
    operation = ProviderOperation.objects.select_related("resource").filter(pk=operation_id).first()
    if operation is None or not operation.is_open:
        return
    check, error = _check(operation)
    now = _now()
    changes: dict[str, Any] = {"updated_at": now, "last_error": error}
    if check is not None:
        changes["state"] = check.state
    still_open = changes.get("state", operation.state) in OPEN_OPERATION_STATES
    if not still_open:
        changes["finished_at"] = now
    with transaction.atomic():
        # Under this attempt's claim: a worker back after its job was taken over would
        # write its older answer over the newer one (a failed operation the provider
        # was still working on, or one settled while its job ran on).
        moved = ProviderOperation.objects.filter(
            current_claim(), pk=operation.pk, state__in=OPEN_OPERATION_STATES
        ).update(**changes)
        if moved and check is not None and check.state == OperationState.SUCCEEDED:
            _saved(operation, check.record_ids)
        if moved and not still_open:
            operation.state = changes["state"]
            _settled(operation)
    if still_open:
        raise RetryAfter(
            error or f"the provider reports it {changes.get('state', operation.state)}"
        )


def _check(operation: ProviderOperation) -> tuple[OperationCheck | None, str]:
    """(the provider's answer, or None when there is no usable one; the error to keep)."""
    kind = operation.resource.kind
    if kind not in provider_kinds():
        return None, f"no provider of kind {kind} is installed"
    try:
        check = provider_for(kind).operation_check(operation=operation)
    except Exception as exc:
        message = getattr(exc, "message", None) or type(exc).__name__
        return None, str(message)[:ERROR_MAX]
    if check.state not in OperationState.values or check.state in {
        OperationState.DEAD,
        OperationState.DISCARDED,
    }:
        return None, f"the provider reported an unknown state {check.state!r}"
    error = check.detail[:ERROR_MAX] if check.state == OperationState.FAILED else ""
    return check, error


def _saved(operation: ProviderOperation, record_ids: tuple[str, ...]) -> None:
    """A session's write that the provider finished, whatever the kind, is the session's
    `record.saved`, as a write answered at once is: the records the provider named (or
    the one the write named), the call, its recall, the operation and when the provider
    accepted it (a write counts for a trace from then: `acceptedAt`). A delete saves
    nothing; an owner's write has no session. In the transaction that settles the
    operation, so a check run twice records it once."""
    if operation.session_id is None or operation.action == OperationAction.DELETE:
        return
    session = Session.objects.filter(pk=operation.session_id).first()
    if session is None:
        return
    stored = list(record_ids) or ([operation.record_id] if operation.record_id else [])
    record_saved(
        session=session,
        resource=operation.resource.resource_id,
        namespace=operation.namespace,
        tool=operation.tool,
        call_id=operation.call_id,
        recall_id=operation.recall_id,
        record_ids=stored,
        operation=operation.id,
        acceptedAt=iso_ms(operation.created_at),
    )


# Called with an operation in the transaction that settles it (the provider's answer that
# it succeeded or failed, or an owner's discard of a dead letter), after its session's
# `record.saved`: registered with `operations_settled_register` from the `ready()` of the
# apps above that follow an operation to its end (an incident's containment).
_SETTLED: list[Callable[[ProviderOperation], None]] = []


def operations_settled_register(hook: Callable[[ProviderOperation], None]) -> None:
    """`hook(operation)` runs in the transaction that settles an operation, once: what it
    writes (a job it enqueues) commits with the settlement or not at all."""
    _SETTLED.append(hook)


def _settled(operation: ProviderOperation) -> None:
    for hook in _SETTLED:
        hook(operation)


def _audit(operation: ProviderOperation, action: str, actor: str, **detail: Any) -> None:
    audit_record(
        project_id=operation.project_id,
        environment=operation.environment,
        actor=actor,
        action=action,
        resource_id=operation.resource.resource_id,
        detail={
            "operation": operation.id,
            "kind": operation.kind,
            "action": operation.action,
            "recordId": operation.record_id,
            "providerOperation": operation.provider_operation,
            "attempts": operation.attempts,
            **detail,
        },
    )


def operations_for(
    *,
    project: Project,
    environment: str,
    state: str | None = None,
    resource_id: str | None = None,
    session_id: str | None = None,
) -> QuerySet[ProviderOperation]:
    check_environment(environment)
    rows = ProviderOperation.objects.filter(project=project, environment=environment)
    if state:
        if state not in STATE_FILTERS:
            raise InvalidRequest(f"state must be one of: {', '.join(STATE_FILTERS)}.")
        rows = rows.filter(state__in=STATE_FILTERS[state])
    if resource_id:
        rows = rows.filter(resource__resource_id=resource_id)
    if session_id:
        rows = rows.filter(session_id=session_id)
    return rows.select_related("resource", "job")


UNSETTLED = (*OPEN_OPERATION_STATES, OperationState.DEAD)
UNSETTLED_SHOWN = 100


def operations_unsettled(
    *,
    project: Project,
    environment: str,
    resource_id: str | None = None,
    session_id: str | None = None,
) -> list[ProviderOperation]:
    """Open operations and dead letters, newest first, for the Memory page."""
    rows = operations_for(
        project=project, environment=environment, resource_id=resource_id, session_id=session_id
    ).filter(state__in=UNSETTLED)
    return list(rows.order_by("-created_at", "id")[:UNSETTLED_SHOWN])


def operation_list(
    *,
    project: Project,
    environment: str,
    state: str | None = None,
    resource_id: str | None = None,
    session_id: str | None = None,
    cursor: str | None = None,
    limit: int = OPERATION_PAGE_SIZE,
) -> tuple[list[ProviderOperation], str | None]:
    rows = operations_for(
        project=project,
        environment=environment,
        state=state,
        resource_id=resource_id,
        session_id=session_id,
    )
    filters = ":".join((state or "", resource_id or "", session_id or ""))
    scope = f"operations:{project.id}:{environment}:{filters}"
    return keyset_page(rows, order=("-created_at", "id"), cursor=cursor, scope=scope, limit=limit)


def operation_get(*, project: Project, environment: str, operation_id: str) -> ProviderOperation:
    check_environment(environment)
    found = (
        ProviderOperation.objects.select_related("resource", "job")
        .filter(project=project, environment=environment, pk=operation_id)
        .first()
    )
    if found is None:
        raise NotFound(f"No operation '{operation_id}' in {environment}.")
    return found


def _settle_dead_letter(
    operation: ProviderOperation, *, action: str, actor: str, changes: dict[str, Any]
) -> ProviderOperation:
    """Applies `changes` to a dead letter, audited as `operation.<action>`; 409 otherwise.
    Retried, its job runs again from the start; discarded, its job is set aside."""
    with transaction.atomic():
        updated = ProviderOperation.objects.filter(
            pk=operation.pk, state=OperationState.DEAD
        ).update(updated_at=_now(), **changes)
        if not updated:
            raise Conflict(
                f"Operation {operation.id} is {operation.state}, not a dead letter; "
                f"only dead letters can be {action}ed."
            )
        if changes["state"] == OperationState.QUEUED:
            if operation.job_id is None or not job_again(operation.job_id):
                job = _schedule(operation.id, operation.project_id)
                ProviderOperation.objects.filter(pk=operation.pk).update(job=job)
        elif operation.job_id is not None:
            job_discard(operation.job_id)
        if changes["state"] == OperationState.DISCARDED:
            operation.state = OperationState.DISCARDED
            _settled(operation)
        _audit(operation, f"operation.{action}", actor)
    operation.refresh_from_db()
    return operation


def operation_retry(*, operation: ProviderOperation, actor: str) -> ProviderOperation:
    """A dead letter checked again from the start: fresh attempts and deadline."""
    if operation.kind == OperationKind.CONTAINMENT_UNDO:
        raise Conflict(
            f"Operation {operation.id} is an incident's undo, not a provider operation to "
            "check: contain the incident again to retry it, or discard it."
        )
    changes = {"state": OperationState.QUEUED, "finished_at": None}
    return _settle_dead_letter(operation, action="retry", actor=actor, changes=changes)


def operation_discard(*, operation: ProviderOperation, actor: str) -> ProviderOperation:
    """A dead letter set aside: it stays listed, as discarded, and is never checked again."""
    changes = {"state": OperationState.DISCARDED}
    return _settle_dead_letter(operation, action="discard", actor=actor, changes=changes)


def operation_dict(operation: ProviderOperation) -> dict[str, Any]:
    return {
        "id": operation.id,
        "kind": operation.kind,
        "state": operation.state,
        "resource": operation.resource.resource_id,
        "namespace": operation.namespace,
        "sessionId": operation.session_id,
        "principal": operation.principal,
        "deploymentId": operation.deployment_id,
        "providerOperation": operation.provider_operation,
        "action": operation.action,
        "tool": operation.tool,
        "callId": operation.call_id,
        "recallId": operation.recall_id,
        "recordId": operation.record_id,
        "attempts": operation.attempts,
        "maxAttempts": operation.max_attempts,
        "lastError": operation.last_error,
        "deadlineAt": iso_ms(deadline) if (deadline := operation.deadline_at) else None,
        "nextCheckAt": iso_ms(next_check) if (next_check := operation.next_check_at) else None,
        "createdAt": iso_ms(operation.created_at),
        "updatedAt": iso_ms(operation.updated_at),
        "finishedAt": iso_ms(operation.finished_at) if operation.finished_at else None,
    }


# Rows of the apps above that name operations by id (an erasure's receipt, an incident's
# containment report), as (model, the column holding the id): registered with
# `operations_named_register` from their `ready()`.
_NAMED: list[tuple[type[models.Model], str]] = []


def operations_named_register(model: type[models.Model], column: str) -> None:
    """An operation whose id a row of `model` holds (in `column`, indexed) is kept past
    `MEMORYADMIN_OPERATIONS_KEEP_DAYS` for as long as the row is: what names it still
    leads to it, the operation as it ended. Called from the naming app's `ready()`."""
    _NAMED.append((model, column))


def operations_past_keeping() -> QuerySet[ProviderOperation] | None:
    """Operations that succeeded, failed or were discarded `MEMORYADMIN_OPERATIONS_KEEP_DAYS`
    ago (their last change: the provider's answer, or the discard) that nothing registered
    names: the workers' housekeeping removes them, their jobs with them (None: kept for
    ever). Open operations and dead letters are never removed: a dead letter is an owner's
    to settle."""
    days = settings.MEMORYADMIN_OPERATIONS_KEEP_DAYS
    if not days:
        return None
    before = _now() - timedelta(days=days)
    due = ProviderOperation.objects.filter(
        state__in=SETTLED_OPERATION_STATES, updated_at__lt=before
    )
    for model, column in _NAMED:
        due = due.exclude(Exists(model._default_manager.filter(**{column: OuterRef("pk")})))
    return due.order_by()
