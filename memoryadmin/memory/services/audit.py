from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import asdict, astuple, dataclass, field, fields
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Protocol

from django.db.models import Q, QuerySet
from django.utils import timezone

from memoryadmin.core.cursors import keyset_page
from memoryadmin.core.environments import check_environment
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.core.rows import column, database_vendor, db_values, fetch_row, table
from memoryadmin.memory.models import AuditEntry, Project
from memoryadmin.runner.jobs import jobs_dispatch_on_commit

AUDIT_PAGE_SIZE = 50


@dataclass(frozen=True)
class AuditFacts:
    """What an audit entry records: the fields of its row."""

    project_id: str | None
    environment: str
    actor: str
    action: str
    resource_id: str = ""
    document_id: str = ""
    revision: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AuditClauses:
    """What a listener adds to a statement that writes its audit entry itself (the
    PostgreSQL replace): `WITH` clauses to append (", name AS (...)") and their
    parameters, and the name of the clause that returns the ids of the jobs it queued."""

    sql: str
    params: list[Any]
    jobs: str


@dataclass(frozen=True)
class AuditGuard:
    """What a listener that expects to write nothing of a change offers instead of its
    clauses: a condition (`sql`, with `params`) that holds exactly when its clauses would
    write nothing. The statement writes the change only if it holds; where it does not,
    the change is written again with the listener's clauses (`guarded=False`)."""

    sql: str
    params: list[Any]


class AuditListener(Protocol):
    """Hears of every audited change in the change's own transaction; an app registers
    one from its AppConfig.ready() (webhooks: the outbox), as provider kinds register."""

    def written(self, facts: AuditFacts) -> None:
        """After the audit entry's own INSERT."""

    def clauses(
        self, facts: AuditFacts, *, source: str, guarded: bool
    ) -> AuditClauses | AuditGuard | None:
        """Its part of one statement whose `WITH` clause `source` returns a row only if
        the change was written; None when it has nothing to add. With `guarded`, it may
        answer a guard instead (it expects its clauses to write nothing)."""

    def queued(self, facts: AuditFacts, jobs: list[int]) -> None:
        """After a statement with its clauses wrote the change: the jobs they queued."""


_LISTENERS: list[AuditListener] = []


def audit_listener_register(listener: AuditListener) -> None:
    if not any(type(known) is type(listener) for known in _LISTENERS):
        _LISTENERS.append(listener)


@dataclass(frozen=True)
class ListenersPart:
    """What the audit listeners make of one change in the statement that writes it and its
    audit entry (`audit_listened`): the guards of those that expect to write nothing
    (conditions of the write), the clauses of the others."""

    facts: AuditFacts
    guards: list[AuditGuard]
    listening: list[tuple[AuditListener, AuditClauses]]

    def condition(self) -> tuple[str, list[Any]]:
        """The guards, as one condition ("" for none), and their parameters."""
        params = [param for guard in self.guards for param in guard.params]
        return " AND ".join(guard.sql for guard in self.guards), params

    def clauses(self) -> tuple[str, list[Any]]:
        """The `WITH` clauses (each ", name AS (...)") and their parameters."""
        params = [param for _, clauses in self.listening for param in clauses.params]
        return "".join(clauses.sql for _, clauses in self.listening), params

    def selected(self) -> str:
        """What the statement's final SELECT adds: a column of job ids per listener."""
        return "".join(f", (SELECT array_agg(id) FROM {c.jobs})" for _, c in self.listening)

    def heard(self, row: Sequence[Any]) -> tuple[Any, ...]:
        """After the statement wrote the change: tells each listener the jobs its clauses
        queued, hands them to the task backend on commit, and returns `row` without the
        job columns `selected` added."""
        if not self.listening:
            return tuple(row)
        jobs_of = [list(ids or []) for ids in row[-len(self.listening) :]]
        for (listener, _), jobs in zip(self.listening, jobs_of, strict=True):
            listener.queued(self.facts, jobs)
        jobs_dispatch_on_commit([job for jobs in jobs_of for job in jobs])
        return tuple(row[: -len(self.listening)])


def _listeners_part(facts: AuditFacts, *, source: str, guarded: bool) -> ListenersPart:
    """Each listener's part of a statement whose `WITH` clause `source` returns a row only
    if the change was written (PostgreSQL); with `guarded`, a listener may answer a guard."""
    guards: list[AuditGuard] = []
    listening: list[tuple[AuditListener, AuditClauses]] = []
    for listener in _LISTENERS:
        part = listener.clauses(facts, source=source, guarded=guarded)
        if isinstance(part, AuditGuard):
            guards.append(part)
        elif part is not None:
            listening.append((listener, part))
    return ListenersPart(facts, guards, listening)


def audit_listened(
    facts: AuditFacts, *, source: str, write: Callable[[ListenersPart], Sequence[Any] | None]
) -> tuple[Any, ...] | None:
    """Runs `write`: the one statement (PostgreSQL) that writes a change, its audit entry
    and the listeners' part of it, whose `WITH` clause `source` returns the change's row.
    Its row without the listeners' job columns; None when nothing was written. A listener
    that expects to add nothing may answer a guard instead of its clauses: where a guard
    was among the statement's conditions and nothing was written, the statement runs
    again with every listener's clauses (the guard may be why)."""
    for guarded in (True, False):
        part = _listeners_part(facts, source=source, guarded=guarded)
        row = write(part)
        if row is not None:
            return part.heard(row)
        if not part.guards:
            return None
    return None


# The audit entry's fields, as AuditFacts names them, then its time.
AUDIT_NAMES = (*(f.name for f in fields(AuditFacts)), "created_at")


@functools.cache
def _audit_insert_sql(vendor: str, source: str) -> str:
    targets = ", ".join(column(AuditEntry, name) for name in AUDIT_NAMES)
    values = ", ".join(["%s"] * len(AUDIT_NAMES))
    rows = f" FROM {source}" if source else ""
    return f"INSERT INTO {table(AuditEntry)} ({targets}) SELECT {values}{rows}"


def audit_insert(facts: AuditFacts, *, source: str = "") -> tuple[str, list[Any]]:
    """`INSERT INTO <audit> (...) SELECT <facts, now>` (once per row of the `WITH` clause
    `source`, when given) and its parameters: the entry as one clause of a statement."""
    values = [getattr(facts, name) for name in AUDIT_NAMES[:-1]]
    params = db_values(AuditEntry, AUDIT_NAMES, [*values, timezone.now()])
    return _audit_insert_sql(database_vendor(), source), params


def _audit_statement(part: ListenersPart) -> tuple[Any, ...] | None:
    """The entry of `part.facts` with the listeners' part, as one PostgreSQL statement; its
    row, None when a guard kept it from being written."""
    insert, params = audit_insert(part.facts)
    condition, condition_params = part.condition()
    if condition:
        insert += f" WHERE {condition}"
        params += condition_params
    clauses, clauses_params = part.clauses()
    sql = (
        f"WITH audit AS ({insert} RETURNING {column(AuditEntry, 'id')}){clauses}"
        f" SELECT 1{part.selected()} FROM audit"
    )
    return fetch_row(sql, [*params, *clauses_params])


def audit_write(facts: AuditFacts) -> None:
    """Records what happened, and what the listeners write of it (same transaction): on
    PostgreSQL in one statement (listeners add `WITH` clauses, or guards), elsewhere the
    entry's INSERT and then each listener's own writes."""
    if database_vendor() == "postgresql":
        written = audit_listened(facts, source="audit", write=_audit_statement)
        assert written is not None, facts  # only a guard keeps it, and the last try has none
        return
    AuditEntry.objects.create(**asdict(facts))
    for listener in _LISTENERS:
        listener.written(facts)


def audit_record(
    *,
    project_id: str | None,
    environment: str,
    actor: str,
    action: str,
    resource_id: str = "",
    document_id: str = "",
    revision: str = "",
    detail: dict[str, Any] | None = None,
) -> None:
    audit_write(
        AuditFacts(
            project_id, environment, actor, action, resource_id, document_id, revision, detail or {}
        )
    )


# Who acted, by kind: agents save as "agent:<session>", API keys act as "key:<prefix>";
# everyone else (people on the page, "cli:<user>" at the command line) is an owner.
ACTOR_KINDS = {"agent": "agent sessions", "owner": "owners", "key": "API keys"}


def actor_kind_filter(kind: str, field: str = "actor") -> Q:
    """The condition on an actor `field` (an audit entry's actor, a version's
    origin__actor) that keeps the actors of `kind`, one of ACTOR_KINDS."""
    agent = Q(**{f"{field}__startswith": "agent:"})
    key = Q(**{f"{field}__startswith": "key:"})
    return {"agent": agent, "key": key, "owner": ~agent & ~key}[kind]


ACTOR_KIND_FILTERS = {kind: actor_kind_filter(kind) for kind in ACTOR_KINDS}


@dataclass(frozen=True)
class AuditFilter:
    """What the audit log is narrowed to; empty fields match everything."""

    resource_id: str = ""
    document_id: str = ""  # any part of the document id, ignoring case
    action: str = ""  # exact, or every action of a kind ("document.*")
    actor: str = ""  # any part of the actor, ignoring case
    actor_kind: str = ""  # one of ACTOR_KINDS
    # A date: from the start of that day / to the end of that day (UTC). A datetime
    # (the API's since/until): from that instant (inclusive) / up to it (exclusive).
    since: date | None = None
    until: date | None = None

    @property
    def narrowed(self) -> bool:
        return any(astuple(self))

    @property
    def scope(self) -> str:
        return ":".join(str(value or "") for value in astuple(self))


def range_instant(value: date, *, end_of_day: bool = False) -> datetime:
    """A range's bound: a date from the start of that day (`end_of_day`: up to its end,
    exclusive), UTC; a datetime as it is."""
    if isinstance(value, datetime):
        return value
    if end_of_day and value == date.max:  # the last day there is has no next one
        return datetime.max.replace(tzinfo=UTC)
    day = value + timedelta(days=1) if end_of_day else value
    return datetime.combine(day, time.min, tzinfo=UTC)


def audit_entries(
    *, project: Project, environment: str, where: AuditFilter = AuditFilter()
) -> QuerySet[AuditEntry]:
    """The entries of a project's environment that match `where`, newest first.

    Project-wide entries (roles, deployments) belong to every environment, unless the
    log is narrowed to a resource or document."""
    check_environment(environment)
    if where.since and where.until and where.since > where.until:
        raise InvalidRequest("The start date of the audit filter is after its end date.")
    entries = AuditEntry.objects.filter(project=project)
    if where.resource_id or where.document_id:
        entries = entries.filter(environment=environment)
    else:
        entries = entries.filter(Q(environment=environment) | Q(environment=""))
    if where.resource_id:
        entries = entries.filter(resource_id=where.resource_id)
    if where.document_id:
        entries = entries.filter(document_id__icontains=where.document_id)
    if where.action.endswith(".*"):  # every action of a kind: "document.*"
        entries = entries.filter(action__startswith=where.action[:-1])
    elif where.action:
        entries = entries.filter(action=where.action)
    if where.actor:
        entries = entries.filter(actor__icontains=where.actor)
    if where.actor_kind:
        if where.actor_kind not in ACTOR_KIND_FILTERS:
            raise InvalidRequest(f"by must be one of: {', '.join(ACTOR_KINDS)}.")
        entries = entries.filter(ACTOR_KIND_FILTERS[where.actor_kind])
    if where.since:
        entries = entries.filter(created_at__gte=range_instant(where.since))
    if where.until:
        entries = entries.filter(created_at__lt=range_instant(where.until, end_of_day=True))
    return entries.order_by("-id")


def audit_list(
    *,
    project: Project,
    environment: str,
    where: AuditFilter = AuditFilter(),
    cursor: str | None = None,
    limit: int = AUDIT_PAGE_SIZE,
) -> tuple[list[AuditEntry], str | None]:
    """Newest first, in keyset pages."""
    entries = audit_entries(project=project, environment=environment, where=where)
    scope = f"audit:{project.id}:{environment}:{where.scope}"
    return keyset_page(entries, order=("-id",), cursor=cursor, scope=scope, limit=limit)


def audit_actions(*, project: Project) -> list[str]:
    """The actions that occur in a project's log, for the filter's choices."""
    actions = set(
        AuditEntry.objects.filter(project=project).values_list("action", flat=True).distinct()
    )
    kinds = {f"{action.split('.')[0]}.*" for action in actions if "." in action}
    return sorted(actions | kinds)


def audit_record_dict(entry: AuditEntry) -> dict[str, Any]:
    """One entry as the downloads write it."""
    return {
        "id": entry.id,
        "time": entry.created_at.isoformat(),
        "environment": entry.environment,
        "actor": entry.actor,
        "action": entry.action,
        "resource": entry.resource_id,
        "document": entry.document_id,
        "revision": entry.revision,
        "detail": entry.detail,
    }
