"""Events, and the outbox rows that carry them to webhook endpoints.

Every change an endpoint can hear of is audited, so the audit entry is where
events come from: `events_for` names the events of an audit action, and the
delivery rows are written next to the audit entry, in the same transaction.
Where the audit entry is written by its own INSERT (`audit_record`), the
deliveries follow in one more statement; where a replace writes its version
and audit entry inside the UPDATE's statement (PostgreSQL), the deliveries
are more `WITH` clauses of that statement (`outbox_statement(source=...)`). The
memory app calls both through the audit listener this app registers from its
`ready()` (`Outbox`), so the document write knows nothing of webhooks.

The statement selects the project's active endpoints that want the event
itself, so a project without endpoints pays no extra query on the
statement path, and an endpoint registered a moment before a change always
hears of it: nothing is cached.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from typing import Any

from django.db import connection
from django.utils import timezone

from memoryadmin.core.rows import column, db_value
from memoryadmin.memory.representations import iso_ms
from memoryadmin.memory.services.audit import AuditClauses, AuditFacts
from memoryadmin.runner.jobs import enqueue, enqueue_sql
from memoryadmin.webhooks.delivery import webhook_drain
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
        "environment": facts.environment,
        "data": event_data(facts),
    }
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def events_column_value(events: Iterable[str]) -> str:
    return "," + ",".join(sorted(set(events))) + ","


def outbox_statement(facts: AuditFacts, *, source: str = "") -> tuple[str, list[Any]] | None:
    """`INSERT INTO <deliveries> SELECT ... RETURNING endpoint_id`: one row per event
    of the audited change and active endpoint of its project that wants it; None
    when the change raises no event. With `source` (a `WITH` clause's name), a row only if
    that clause returned one: the write happened."""
    events = events_for(facts.action)
    if not events or facts.project_id is None:
        return None
    now = timezone.now()
    at = iso_ms(now)
    event_rows: list[Any] = []
    for event in events:
        event_id = new_event_id()
        event_rows += [event_id, event, event_body(facts, event=event, event_id=event_id, at=at)]
    quote = connection.ops.quote_name
    names = ["endpoint", "event_id", "event", "body", "state", "attempts", "next_attempt_at"]
    names += ["created_at", "last_error"]
    targets = ", ".join(column(Delivery, name) for name in names)
    values = ", ".join(["(%s, %s, %s)"] * len(events))
    joined = f"{source} CROSS JOIN " if source else ""
    sql = (
        f"INSERT INTO {quote(Delivery._meta.db_table)} ({targets})"
        " SELECT e.id, ev.column1, ev.column2, ev.column3, %s, 0, %s, %s, ''"
        f" FROM {joined}{quote(Endpoint._meta.db_table)} e"
        f" CROSS JOIN (VALUES {values}) AS ev"
        f" WHERE e.{column(Endpoint, 'project')} = %s AND e.{column(Endpoint, 'active')} = %s"
        f" AND e.{column(Endpoint, 'events')} LIKE ('%%,' || ev.column2 || ',%%')"
        f" RETURNING {column(Delivery, 'endpoint')}"
    )
    at_now = db_value(Delivery, "created_at", now)
    params = [DeliveryState.PENDING, at_now, at_now]
    params += event_rows
    params += [facts.project_id, True]
    return sql, params


def outbox_jobs_statement(*, project: str, deliveries: str) -> tuple[str, list[Any]]:
    """The delivery runs of the endpoints a `WITH` clause named `deliveries` (an
    outbox_statement) wrote to: one job per endpoint, in the same statement."""
    endpoint = column(Delivery, "endpoint")
    return enqueue_sql(
        webhook_drain,
        project=project,
        rows=f"(SELECT DISTINCT {endpoint} FROM {deliveries}) AS d",
        kwargs=f"jsonb_build_object('endpoint', d.{endpoint})",
    )


def outbox_write(facts: AuditFacts) -> None:
    """Writes the deliveries of an audited change (the caller's transaction) and their jobs."""
    statement = outbox_statement(facts)
    if statement is None:
        return
    with connection.cursor() as cursor:
        cursor.execute(*statement)
        endpoint_ids = [row[0] for row in cursor.fetchall()]
    outbox_enqueue(facts.project_id or "", endpoint_ids)


def outbox_enqueue(project: str, endpoint_ids: Iterable[int]) -> None:
    """Queues a delivery run for each endpoint (of `project`) that got deliveries."""
    for endpoint_id in sorted(set(endpoint_ids)):
        enqueue(webhook_drain, project=project, endpoint=endpoint_id)


class Outbox:
    """The audit listener of webhooks: the deliveries of every audited change."""

    def written(self, facts: AuditFacts) -> None:
        outbox_write(facts)

    def clauses(self, facts: AuditFacts, *, source: str) -> AuditClauses | None:
        deliveries = outbox_statement(facts, source=source)
        if deliveries is None or facts.project_id is None:
            return None
        jobs = outbox_jobs_statement(project=facts.project_id, deliveries="webhook_deliveries")
        return AuditClauses(
            sql=f", webhook_deliveries AS ({deliveries[0]}), webhook_jobs AS ({jobs[0]})",
            params=deliveries[1] + jobs[1],
            jobs="webhook_jobs",
        )
