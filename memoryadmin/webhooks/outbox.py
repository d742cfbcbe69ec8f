"""Events, and the outbox rows that carry them to webhook endpoints.

Every change an endpoint can hear of is audited, so the audit entry is where
events come from: `events_for` names the events of an audit action, and the
delivery rows are written next to the audit entry, in the same transaction.
Each delivery comes with the runner job that sends it, in its endpoint's line.
On PostgreSQL they are `WITH` clauses of the statement that writes the audit
entry (`outbox_clauses`): its own INSERT's (`audit_write`), or a replace's
UPDATE's, which writes its version and audit entry in the same statement. On
other databases they follow the entry's INSERT (`outbox_write`). The memory app
calls both through the audit listener this app registers from its `ready()`
(`Outbox`), so the document write knows nothing of webhooks.

The statement selects the project's active endpoints that want the event itself, so
a project without endpoints pays no extra query on the statement path, and an
endpoint registered a moment before a change always hears of it. Where the last
change of a project raising the same events written by this process queued nothing
(no endpoint wanted it), the next is written under a guard instead of the clauses
(`outbox_guard`): the change is written only if still no active endpoint of the
project wants its events, decided in the statement itself, and where one does, it is
written again with the clauses. What the process remembers only chooses between two
statements that write the same.
"""

from __future__ import annotations

import functools
import json
import secrets
from collections.abc import Iterable
from typing import Any

from django.db.models import Q
from django.utils import timezone

from memoryadmin.core.rows import column, database_vendor, db_value, table
from memoryadmin.memory.representations import iso_ms
from memoryadmin.memory.services.audit import AuditClauses, AuditFacts, AuditGuard
from memoryadmin.runner.jobs import enqueue_many, enqueue_sql
from memoryadmin.runner.models import Job
from memoryadmin.webhooks.delivery import LINE_PREFIX, line_of, webhook_deliver
from memoryadmin.webhooks.models import Delivery, DeliveryState, Endpoint

EVENT_TYPES = (
    "document.created",
    "document.updated",
    "document.deleted",
    "document.frozen",
    "document.unfrozen",
    "incident.contained",
    "memory.saved",
    "proposal.created",
    "session.created",
    "session.ended",
)

_EVENTS_OF_ACTION: dict[str, tuple[str, ...]] = {
    "document.create": ("document.created",),
    "document.delete": ("document.deleted",),
    "document.freeze": ("document.frozen",),
    "document.unfreeze": ("document.unfrozen",),
    "incident.contain": ("incident.contained",),
    # An agent's save changes the document like any other write, and is a save.
    "document.save": ("document.updated", "memory.saved"),
    "proposal.create": ("proposal.created",),
    "session.create": ("session.created",),
    "session.end": ("session.ended",),
}
# Audit detail an event repeats (the rest, such as sizes, stays in the audit log).
_DETAIL_SHOWN = {
    "session": "session",
    "agent": "agent",
    "proposalId": "proposalId",
    "incident": "incident",
    "actions": "actions",
    "changed": "changed",
}


def events_for(action: str) -> tuple[str, ...]:
    """The events an audit action raises: every other change of a document's
    content, title or write mode is `document.updated`."""
    events = _EVENTS_OF_ACTION.get(action)
    if events is not None:
        return events
    if action.startswith("document."):
        return ("document.updated",)
    return ()


def new_event_id() -> str:
    return "evt_" + secrets.token_hex(12)


def event_data(facts: AuditFacts) -> dict[str, Any]:
    """What an event says of its change: ids, revision and actor, never content."""
    shown: dict[str, Any] = {
        "resource": facts.resource_id,
        "document": facts.document_id,
        "revision": facts.revision,
        "actor": facts.actor,
    }
    if facts.actor.startswith("agent:"):
        shown["session"] = facts.actor.removeprefix("agent:")
    for name, as_name in _DETAIL_SHOWN.items():
        if name in facts.detail:
            shown[as_name] = facts.detail[name]
    return {name: value for name, value in shown.items() if value not in ("", None)}


def event_body(facts: AuditFacts, *, event: str, event_id: str, at: str) -> str:
    """The JSON an endpoint receives (and the signature covers), byte for byte."""
    body = {
        "id": event_id,
        "type": event,
        "createdAt": at,
        "project": facts.project_id,
        # The environment the change was made in; null for one of none (webhook.test).
        "environment": facts.environment or None,
        "data": event_data(facts),
    }
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def events_column_value(events: Iterable[str]) -> str:
    return "," + ",".join(sorted(set(events))) + ","


def _events(facts: AuditFacts) -> list[tuple[str, str, str]]:
    """(event id, event, body) of each event of the audited change, in order."""
    at = iso_ms(timezone.now())
    rows = []
    for event in events_for(facts.action):
        event_id = new_event_id()
        rows.append((event_id, event, event_body(facts, event=event, event_id=event_id, at=at)))
    return rows


def outbox_clauses(facts: AuditFacts, *, source: str) -> tuple[str, list[Any]] | None:
    """`WITH` clauses (each `, name AS (...)`) writing, for every event of the audited
    change and active endpoint of its project that wants it, the delivery and the job
    that sends it in the endpoint's line; `webhook_jobs` returns the jobs' ids. None
    when the change raises no event. Rows only if the `WITH` clause `source` returned
    one: the change was written. PostgreSQL only."""
    events = _events(facts)
    if not events or facts.project_id is None:
        return None
    event_params: list[Any] = []
    for ordinal, event in enumerate(events):
        event_params += [ordinal, *event]
    vendor = database_vendor()
    jobs_sql, jobs_params = enqueue_sql(
        webhook_deliver,
        project=facts.project_id,
        rows=_endpoint_rows(vendor, source),
        kwargs="jsonb_build_object('endpoint', e.id, 'event', ev.event_id)",
        line=f"'{LINE_PREFIX}' || e.id",
        order="e.id, ev.ordinal",
        returning=column(Job, "kwargs"),
        # The endpoints it queues for, locked as their key's check at commit would lock
        # them: one deleted meanwhile (`endpoint_delete` locks it first) is skipped once
        # its deletion commits, where the change failed at its own commit (the delivery's
        # key missing), and one being deleted waits for the change, whose deliveries
        # then go with it.
        lock="FOR KEY SHARE OF e",
    )
    # In the order of their placeholders: the events, the job's columns, the rows'
    # conditions, the delivery's columns.
    params = [*event_params, *jobs_params, facts.project_id, True]
    params += [DeliveryState.PENDING, db_value(Delivery, "created_at", timezone.now())]
    return _outbox_sql(vendor, len(events), jobs_sql), params


def _wants(vendor: str) -> str:
    """The condition of a pair of an endpoint `e` and an event `ev.event`: the endpoint is
    an active one of the project (the next parameters: the project and True) and wants
    the event."""
    return (
        f"e.{column(Endpoint, 'project')} = %s AND e.{column(Endpoint, 'active')} = %s"
        f" AND e.{column(Endpoint, 'events')} LIKE ('%%,' || ev.event || ',%%')"
    )


@functools.cache
def _endpoint_rows(vendor: str, source: str) -> str:
    """The rows of the jobs: each pair of an endpoint and an event that `_wants`, once per
    row of the `WITH` clause `source` (the written change's one)."""
    pairs = f"{table(Endpoint)} e CROSS JOIN webhook_events ev"
    return f"{source} CROSS JOIN {pairs} WHERE {_wants(vendor)}"


@functools.cache
def _guard_sql(vendor: str, events: int) -> str:
    """No pair of an endpoint and one of `events` events (the next parameters) `_wants`:
    the condition under which `outbox_clauses` writes nothing."""
    values = ", ".join(["(%s)"] * events)
    return (
        f"NOT EXISTS (SELECT 1 FROM {table(Endpoint)} e CROSS JOIN (VALUES {values})"
        f" ev (event) WHERE {_wants(vendor)})"
    )


def outbox_guard(facts: AuditFacts) -> AuditGuard | None:
    """The guard of a change whose clauses are expected to write nothing (`AuditGuard`):
    it holds exactly when `outbox_clauses` would write no delivery. None when the change
    raises no event. PostgreSQL only."""
    events = events_for(facts.action)
    if not events or facts.project_id is None:
        return None
    params = [*events, facts.project_id, True]
    return AuditGuard(sql=_guard_sql(database_vendor(), len(events)), params=params)


# (project, events) of which the last change written by this process with the outbox's
# clauses queued no delivery: the next such change is written under `outbox_guard`
# instead (at most this many kept; forgetting one costs nothing but the clauses once more).
# By events, not only by project: a project's endpoints may want some of its changes
# and not others.
_QUIET_MAX = 10_000
_quiet: set[tuple[str, tuple[str, ...]]] = set()


def outbox_forget(project_id: str) -> None:
    """The project's next changes are written with the clauses (an endpoint of it was made
    or changed here: it will likely want something, and the guard would fail first)."""
    for known in [known for known in _quiet if known[0] == project_id]:
        _quiet.discard(known)


@functools.cache
def _outbox_sql(vendor: str, events: int, jobs_sql: str) -> str:
    """The clauses of `events` events whose jobs `jobs_sql` inserts: the same text for
    every change of as many events, built once."""
    values = ", ".join(["(%s, %s, %s, %s)"] * events)
    names = ["endpoint", "event_id", "event", "body", "state", "job", "created_at", "last_error"]
    targets = ", ".join(column(Delivery, name) for name in names)
    kwargs = column(Job, "kwargs")
    deliveries = (
        f"INSERT INTO {table(Delivery)} ({targets})"
        f" SELECT (j.{kwargs}->>'endpoint')::bigint, ev.event_id, ev.event, ev.body, %s,"
        f" j.{column(Job, 'id')}, %s, '' FROM webhook_jobs j"
        f" JOIN webhook_events ev ON ev.event_id = j.{kwargs}->>'event'"
    )
    return (
        f", webhook_events (ordinal, event_id, event, body) AS (VALUES {values})"
        f", webhook_jobs AS ({jobs_sql})"
        f", webhook_deliveries AS ({deliveries})"
    )


def outbox_write(facts: AuditFacts) -> None:
    """Writes the deliveries of an audited change and their jobs after its audit entry
    (the caller's transaction), where the entry is not written with them in one statement
    (not PostgreSQL): three statements (none past the first when no endpoint wants the
    change)."""
    events = _events(facts)
    if not events or facts.project_id is None:
        return
    wanted = Q()
    for _, event, _ in events:
        wanted |= Q(events__contains=f",{event},")
    endpoints = (
        Endpoint.objects.filter(wanted, project_id=facts.project_id, active=True)
        .order_by("pk")
        .values_list("pk", "events")
    )
    pairs = [
        (endpoint, event)
        for endpoint, wants in endpoints
        for event in events
        if f",{event[1]}," in wants
    ]
    if not pairs:
        return
    jobs = enqueue_many(
        webhook_deliver,
        project=facts.project_id,
        jobs=[
            (line_of(endpoint), {"endpoint": endpoint, "event": event[0]})
            for endpoint, event in pairs
        ],
    )
    now = timezone.now()
    Delivery.objects.bulk_create(
        Delivery(
            endpoint_id=endpoint,
            event_id=event_id,
            event=event,
            body=body,
            job=job,
            created_at=now,
        )
        for (endpoint, (event_id, event, body)), job in zip(pairs, jobs, strict=True)
    )


class Outbox:
    """The audit listener of webhooks: the deliveries of every audited change."""

    def written(self, facts: AuditFacts) -> None:
        outbox_write(facts)

    def clauses(
        self, facts: AuditFacts, *, source: str, guarded: bool
    ) -> AuditClauses | AuditGuard | None:
        if guarded and (facts.project_id, events_for(facts.action)) in _quiet:
            return outbox_guard(facts)
        clauses = outbox_clauses(facts, source=source)
        if clauses is None:
            return None
        return AuditClauses(sql=clauses[0], params=clauses[1], jobs="webhook_jobs")

    def queued(self, facts: AuditFacts, jobs: list[int]) -> None:
        if facts.project_id is None:
            return
        known = (facts.project_id, events_for(facts.action))
        if jobs:
            _quiet.discard(known)
            return
        if len(_quiet) >= _QUIET_MAX:
            _quiet.clear()
        _quiet.add(known)
