from __future__ import annotations

from dataclasses import asdict, astuple, dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Protocol

from django.db.models import Q, QuerySet

from memoryadmin.core.cursors import keyset_page
from memoryadmin.core.environments import check_environment
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.memory.models import AuditEntry, Project

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


def audit_listeners() -> tuple[AuditListener, ...]:
    return tuple(_LISTENERS)


def audit_write(facts: AuditFacts) -> AuditEntry:
    """Records what happened, and what the listeners write of it (same transaction)."""
    entry = AuditEntry.objects.create(**asdict(facts))
    for listener in _LISTENERS:
        listener.written(facts)
    return entry


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
) -> AuditEntry:
    return audit_write(
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
