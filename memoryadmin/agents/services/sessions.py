"""Sessions: create (idempotently), inspect, list, end, and their ordered events."""

from __future__ import annotations

import functools
import hashlib
import json
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from memoryadmin.agents.bindings import BindingSpec, binding_spec, bindings_admit, bindings_parse
from memoryadmin.agents.errors import IdempotencyConflict, InvalidMemoryBinding, SessionNotFound
from memoryadmin.agents.models import (
    Binding,
    EventType,
    Scope,
    Session,
    SessionEvent,
    SessionStatus,
)
from memoryadmin.core.cursors import keyset_page
from memoryadmin.core.environments import Environment, check_environment
from memoryadmin.core.errors import Forbidden, InvalidRequest, NotFound, PreconditionFailed
from memoryadmin.core.inputs import parse_int
from memoryadmin.core.rows import (
    Compiled,
    column,
    columns,
    columns_of,
    concrete_names,
    database_vendor,
    db_connection,
    fetch_row,
    fetch_rows,
    first_row_only,
    first_row_window,
    insert_rows,
    insert_sql,
    inserted,
    instance,
    joined_instance,
    prepared,
    related_set,
    table,
    values_of,
)
from memoryadmin.core.strings import strings_check
from memoryadmin.memory.limits import check_agent_id
from memoryadmin.memory.models import ApiKey, Deployment, Document, Project, Resource
from memoryadmin.memory.providers import keeps_documents
from memoryadmin.memory.representations import DOCUMENT_FIELDS
from memoryadmin.memory.services.audit import audit_record
from memoryadmin.memory.services.deployments import (
    active_deployment,
    deployment_get,
    resource_get,
)
from memoryadmin.memory.services.documents import document_create, document_get
from memoryadmin.memory.services.keys import (
    API_KEY_ROW_WIDTH,
    api_key_authenticate,
    api_key_columns,
    api_key_hashed,
    api_key_of_row,
    api_key_usable,
)

IDEMPOTENCY_KEY_MAX = 256
# Printable characters only: the key travels in an HTTP header.
IDEMPOTENCY_KEY_RE = re.compile(r"[\x20-\x7e]{1,256}")
LABELS_MAX = 32
LABEL_KEY_MAX = 64
LABEL_VALUE_MAX = 256
SESSION_PAGE_SIZE = 50
# How agentId names an agent in one environment.
AGENT_REFS = " or ".join(f"<agent>@{name}" for name in Environment.values)
EVENT_PAGE_SIZE = 500
# The largest `after` an events page takes (twelve digits, far beyond any seq).
AFTER_MAX = 10**12 - 1


def new_session_id() -> str:
    return "ses_" + secrets.token_hex(12)


def agent_ref_parse(value: object) -> tuple[str, str]:
    """`<agent>@<environment>` split into its parts."""
    if not isinstance(value, str) or value.count("@") != 1:
        raise InvalidRequest(f"agentId must be {AGENT_REFS}.")
    agent, environment = value.split("@")
    return check_agent_id(agent), check_environment(environment)


def check_idempotency_key(value: object) -> str:
    if not isinstance(value, str) or not IDEMPOTENCY_KEY_RE.fullmatch(value):
        raise InvalidRequest(
            f"Idempotency-Key is required: 1-{IDEMPOTENCY_KEY_MAX} printable ASCII characters."
        )
    return value


def labels_check(raw: object) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidRequest("labels must be an object of strings.")
    strings_check(raw, field="labels")
    if len(raw) > LABELS_MAX:
        raise InvalidRequest(f"labels takes at most {LABELS_MAX} entries.")
    for name, value in raw.items():
        if not 1 <= len(name) <= LABEL_KEY_MAX:
            raise InvalidRequest(f"Label names are 1-{LABEL_KEY_MAX} characters.")
        if not isinstance(value, str) or len(value) > LABEL_VALUE_MAX:
            raise InvalidRequest(
                f"labels.{name} must be a string of at most {LABEL_VALUE_MAX} characters."
            )
    return dict(raw)


def _fingerprint(agent: str, deployment_id: str, environment: str, specs: list[BindingSpec]) -> str:
    canonical = json.dumps(
        {
            "agent": agent,
            "deployment": deployment_id,
            "environment": environment,
            "memory": [spec.as_dict() for spec in specs],
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _pinned_deployment(
    project: Project, agent: str, environment: str, deployment_id: str | None
) -> Deployment:
    if deployment_id is None:
        deployment = active_deployment(project=project, environment=environment, agent=agent)
        if deployment is None:
            raise InvalidRequest(
                f"Agent '{agent}' has no active deployment in {environment}; "
                "promote one or pass deploymentId."
            )
        return deployment
    deployment = deployment_get(project=project, deployment_id=deployment_id)
    if deployment.agent != agent:
        raise InvalidRequest(
            f"Deployment {deployment_id} belongs to agent '{deployment.agent}', not '{agent}'."
        )
    return deployment


def _replay(
    existing: Session,
    fingerprint: str,
    *,
    agent: str,
    environment: str,
    deployment: Deployment,
    specs: list[BindingSpec],
) -> Session:
    """The session a reused key created, if the request repeats its inputs."""
    if existing.fingerprint == fingerprint:
        return existing
    stored = [binding_spec(b) for b in existing.bindings.select_related("resource")]
    differs = [
        name
        for name, same in (
            ("agent", existing.agent == agent),
            ("deployment", existing.deployment_id == deployment.id),
            ("environment", existing.environment == environment),
            ("memory", sorted(stored, key=lambda s: s.resource) == specs),
        )
        if not same
    ]
    raise IdempotencyConflict(
        f"This Idempotency-Key already created session {existing.id} with a different "
        f"{', '.join(differs) or 'set of inputs'}; use a new key for a different session.",
        differs=differs,
    )


def session_create(
    *,
    project: Project,
    agent_id: str,
    deployment_id: str | None = None,
    memory: object = None,
    labels: object = None,
    idempotency_key: str,
    actor: str,
) -> tuple[Session, bool]:
    """Creates a session, or returns the one this key already created.

    Returns the session and whether this call created it. The session row is written
    first: the unique (project, key) constraint decides between this call and any
    other with the key (one that has not committed yet is waited for), and where it
    refuses, the transaction is rolled back whole and the session already made is
    replayed, without the look-up and savepoint every creation would otherwise pay.
    """
    check_idempotency_key(idempotency_key)
    agent, environment = agent_ref_parse(agent_id)
    deployment = _pinned_deployment(project, agent, environment, deployment_id)
    specs = bindings_parse(memory)
    checked_labels = labels_check(labels)
    fingerprint = _fingerprint(agent, deployment.id, environment, specs)
    facts: dict[str, Any] = {
        "agent": agent,
        "environment": environment,
        "deployment": deployment,
        "specs": specs,
    }
    session = Session(
        id=new_session_id(),
        project=project,
        environment=environment,
        agent=agent,
        deployment=deployment,
        labels=checked_labels,
        idempotency_key=idempotency_key,
        fingerprint=fingerprint,
        created_at=timezone.now(),
    )
    try:
        _session_write(session, specs, actor=actor)
    except IntegrityError:
        existing = Session.objects.filter(project=project, idempotency_key=idempotency_key).first()
        if existing is None:
            raise
        return _replay(existing, fingerprint, **facts), False
    return session, True


@transaction.atomic
def _session_write(session: Session, specs: list[BindingSpec], *, actor: str) -> None:
    """A new session with its bindings (admitted first), its first event and its audit
    entry, or nothing: IntegrityError where the session's key is taken. The first event
    is numbered as the row is written, with no update of it."""
    created = _next_event(
        session,
        EventType.SESSION_CREATED,
        {
            "agent": session.agent,
            "environment": session.environment,
            "deploymentId": session.deployment_id,
        },
        at=session.created_at,
    )
    insert_rows([session])
    resources = bindings_admit(
        deployment=session.deployment, environment=session.environment, specs=specs
    )
    session.written_bindings = [
        Binding(
            session=session,
            resource=resources[spec.resource],
            scope=spec.scope,
            target_id=spec.target_id,
            access=spec.access,
            search=spec.search,
        )
        for spec in specs
    ]
    insert_rows(session.written_bindings)
    insert_rows([created])
    audit_record(
        project_id=session.project_id,
        environment=session.environment,
        actor=actor,
        action="session.create",
        detail={"session": session.id, "agent": session.agent, "deployment": session.deployment_id},
    )


def event_append(*, session: Session, type: str, data: dict[str, Any]) -> SessionEvent:
    """Appends the session's next event. The caller holds the session row
    (created it, or locked it with select_for_update), so seq cannot race."""
    event = _next_event(session, type, data, at=timezone.now())
    if database_vendor() != "postgresql":
        Session.objects.filter(pk=session.pk).update(last_seq=session.last_seq)
        insert_rows([event])
        return event
    # The session's number and the event in one statement.
    params = [session.last_seq, session.pk, *prepared(event, _event_names())]
    row = fetch_row(_event_append_sql(), params)
    assert row is not None
    event.pk = row[0]
    inserted(event)
    return event


@functools.cache
def _event_names() -> tuple[str, ...]:
    """The event's fields but its id, as the statement of `_event_append_sql` inserts them."""
    return tuple(concrete_names(SessionEvent, auto=False))


@functools.cache
def _event_append_sql() -> str:
    """PostgreSQL: the session's `last_seq` set (parameters: it, the session's id) and the
    event inserted (its fields but the id), in one statement returning the event's id."""
    moved = (
        f"UPDATE {table(Session)} SET {column(Session, 'last_seq')} = %s"
        f" WHERE {column(Session, 'id')} = %s"
    )
    written = insert_sql(SessionEvent, _event_names())
    return f"WITH moved AS ({moved}) {written} RETURNING {column(SessionEvent, 'id')}"


def _next_event(session: Session, type: str, data: dict[str, Any], *, at: datetime) -> SessionEvent:
    """The session's next event, numbered (its `last_seq` moved on), not yet written."""
    session.last_seq += 1
    return SessionEvent(session=session, seq=session.last_seq, type=type, data=data, created_at=at)


def record_saved(
    *,
    session: Session,
    resource: str,
    namespace: str,
    tool: str,
    call_id: str,
    recall_id: str,
    record_ids: list[str],
    **more: Any,
) -> None:
    """Appends a `record.saved` event: what a tool call stored through a provider whose
    records live elsewhere (resource, namespace, tool, call, recall and the record ids,
    and `more`: a write the provider finished later names its operation and when it was
    accepted), the one durable trace of which session wrote which record."""
    data = {
        "resource": resource,
        "namespace": namespace,
        "tool": tool,
        "callId": call_id,
        "recallId": recall_id,
        "recordIds": record_ids,
        **more,
    }
    with transaction.atomic():
        event_append(session=session_lock(session=session), type=EventType.RECORD_SAVED, data=data)


@functools.cache
def _session_sql(
    vendor: str, with_bindings: bool, with_documents: bool = False, with_key: bool = False
) -> str:
    """The session with its deployment and its project's erasure epoch (read with the
    memory a recall shows: `recall_store`); `with_bindings`: one row per binding, with
    its resource, by resource id (one row of NULLs when there is none);
    `with_documents`: and a document binding's live document, its DOCUMENT_FIELDS
    (NULLs otherwise);
    `with_key` (PostgreSQL): all of it LEFT JOINed to the API key of the request, whose
    columns come first (parameters: the session id, then the key's hash).

    With bindings, only the first row carries the key's, session's and deployment's
    columns and the epoch (NULLs on the others): they are the same on every row, and each row's copy
    cost its conversion (the deployment's and the session's JSON among them)."""
    head = (
        f"{columns(Session, 's')}, {columns(Deployment, 'd')}, p.{column(Project, 'erasure_epoch')}"
    )
    if with_key:
        head = f"{api_key_columns('k')}, {head}"
    selected = ""
    joined = (
        f" {table(Session)} s JOIN {table(Deployment)} d"
        f" ON d.{column(Deployment, 'id')} = s.{column(Session, 'deployment')}"
        f" JOIN {table(Project)} p ON p.{column(Project, 'id')} = s.{column(Session, 'project')}"
    )
    order = ""
    if with_bindings:
        selected += f", {columns(Binding, 'b')}, {columns(Resource, 'r')}"
        joined += (
            f" LEFT JOIN {table(Binding)} b"
            f" ON b.{column(Binding, 'session')} = s.{column(Session, 'id')}"
            f" LEFT JOIN {table(Resource)} r"
            f" ON r.{column(Resource, 'id')} = b.{column(Binding, 'resource')}"
        )
        head = first_row_only(head)
        # By resource id, as bindings are listed; the binding's id makes the order total.
        order = first_row_window(f"r.{column(Resource, 'resource_id')}, b.{column(Binding, 'id')}")
    if with_documents:
        selected += f", {columns_of(Document, DOCUMENT_FIELDS, 'doc')}"
        joined += (
            f" LEFT JOIN {table(Document)} doc"
            f" ON b.{column(Binding, 'scope')} = '{Scope.DOCUMENT.value}'"
            f" AND doc.{column(Document, 'resource')} = b.{column(Binding, 'resource')}"
            f" AND doc.{column(Document, 'doc_id')} = b.{column(Binding, 'target_id')}"
            f" AND NOT doc.{column(Document, 'deleted')}"
        )
    selected = head + selected
    if with_key:
        return (
            f"SELECT {selected} FROM {table(ApiKey)} k"
            f" LEFT JOIN ({joined}) ON s.{column(Session, 'id')} = %s"
            f" WHERE k.{column(ApiKey, 'hashed')} = %s{order}"
        )
    return f"SELECT {selected} FROM{joined} WHERE s.{column(Session, 'id')} = %s{order}"


def _session_rows(
    session_id: str,
    *,
    with_bindings: bool,
    with_documents: bool = False,
    rows: list[tuple[Any, ...]] | None = None,
) -> tuple[Session | None, list[Binding]]:
    if rows is None:
        sql = _session_sql(database_vendor(), with_bindings, with_documents)
        rows = fetch_rows(sql, [session_id])
    if not rows or rows[0][0] is None:  # no session (with_key: the LEFT JOIN's NULLs)
        return None, []
    session_end_at = len(Session._meta.concrete_fields)
    deployment_end_at = session_end_at + len(Deployment._meta.concrete_fields)
    binding_at = deployment_end_at + 1  # after the project's erasure epoch
    resource_end_at = (
        binding_at + len(Binding._meta.concrete_fields) + len(Resource._meta.concrete_fields)
    )
    wrapper = db_connection()
    session = joined_instance(Session, "deployment", rows[0][:deployment_end_at], wrapper=wrapper)
    session.erasure_epoch = rows[0][deployment_end_at]
    bindings = []
    for row in rows if with_bindings else []:
        if row[binding_at] is None:  # no binding: the LEFT JOIN's empty row
            continue
        binding = joined_instance(
            Binding, "resource", row[binding_at:resource_end_at], wrapper=wrapper
        )
        related_set(binding, "session", session)
        if with_documents:
            # Read in the same statement: the document provider need not read it again.
            # Its fields as values, not a model: a recall reads nothing else of it.
            found = row[resource_end_at:]
            binding.bound_document = (
                values_of(Document, DOCUMENT_FIELDS, found, wrapper=wrapper)
                if found[0] is not None
                else None
            )
        bindings.append(binding)
    return session, bindings


def _reachable(
    session: Session | None, session_id: str, key: ApiKey | None, write: bool
) -> Session:
    # Sessions outside the key's reach are as missing as unknown ones.
    if session is None or (key is not None and not key.can_reach(session.project_id)):
        raise SessionNotFound(f"No session '{session_id}'.")
    if write and key is not None and key.read_only:
        raise Forbidden("This API key is read-only.")
    return session


def session_get(*, session_id: str, key: ApiKey | None = None, write: bool = False) -> Session:
    """A session, if it exists and the key (when given) reaches its project."""
    session, _ = _session_rows(session_id, with_bindings=False)
    return _reachable(session, session_id, key, write)


def session_get_with_bindings(
    *,
    session_id: str,
    key: ApiKey | None = None,
    write: bool = False,
    lookup: SessionLookup | None = None,
    with_documents: bool = True,
) -> tuple[Session, list[Binding]]:
    """`session_get`, and the session's bindings with their resources by resource id
    and (`with_documents`) the live documents of document bindings, in the same query
    (what a recall or a tool call reads first), or as `lookup` read them with the key."""
    if (
        lookup is not None
        and lookup.session_id == session_id
        and (lookup.with_documents or not with_documents)
    ):
        session, bindings = lookup.session, lookup.bindings
    else:
        session, bindings = _session_rows(
            session_id, with_bindings=True, with_documents=with_documents
        )
    return _reachable(session, session_id, key, write), bindings


@dataclass(frozen=True)
class SessionLookup:
    """A session a request names, read with the request's key (its bindings, their
    resources and, `with_documents`, the bound documents); whether the key reaches it
    is for `session_get_with_bindings` to decide."""

    session_id: str
    session: Session | None
    bindings: list[Binding]
    with_documents: bool


def api_key_authenticate_with_session(
    *, raw: str, session_id: str, with_documents: bool
) -> tuple[ApiKey | None, SessionLookup | None]:
    """The key and the session a recall (`with_documents`) or a tool call reads, in one
    round trip (PostgreSQL; elsewhere no lookup: the caller authenticates as usual)."""
    hashed = api_key_hashed(raw)
    if database_vendor() != "postgresql" or hashed is None:
        return api_key_authenticate(raw=raw), None
    sql = _session_sql(database_vendor(), True, with_documents, True)
    rows = fetch_rows(sql, [session_id, hashed])
    if not rows:
        return None, None
    width = API_KEY_ROW_WIDTH
    key = api_key_usable(api_key_of_row(rows[0]))
    session, bindings = _session_rows(
        session_id,
        with_bindings=True,
        with_documents=with_documents,
        rows=[row[width:] for row in rows],
    )
    return key, SessionLookup(session_id, session, bindings, with_documents)


def session_bindings(*, session: Session) -> list[Binding]:
    """The session's bindings with their resources, by resource id (one query)."""
    return _session_rows(session.pk, with_bindings=True)[1]


_SESSION_LOCKED = Compiled(
    lambda session_id: (
        Session.objects.select_for_update()
        .filter(pk=session_id)
        .values_list(*concrete_names(Session))
    ),
    (str,),
)


def session_lock(*, session: Session) -> Session:
    """The session row, locked until the end of the current transaction."""
    row = _SESSION_LOCKED.row(session.pk)
    if row is None:
        raise Session.DoesNotExist(f"No session {session.pk}.")
    return instance(Session, row)


def session_end(*, session: Session, actor: str) -> Session:
    """Ends a session, revoking its memory writes; ending it again changes nothing.

    Takes the lock every agent save takes, so no save commits after an end (in
    sessions_end's transaction).
    """
    return sessions_end(session_ids=[session.pk], actor=actor)[0]


@transaction.atomic
def sessions_end(*, session_ids: list[str], actor: str) -> list[Session]:
    """Ends many sessions as session_end ends one, in a few statements whatever their
    number (an incident's containment): their rows locked in id order, the active ones
    ended, each with its `session.ended` event and audit entry. Returns them all, by id."""
    locked = list(Session.objects.select_for_update().filter(pk__in=session_ids).order_by("id"))
    active = [session for session in locked if session.is_active]
    if not active:
        return locked
    now = timezone.now()
    events = []
    for session in active:
        session.status, session.ended_at = SessionStatus.ENDED, now
        events.append(_next_event(session, EventType.SESSION_ENDED, {}, at=now))
    Session.objects.bulk_update(active, ["status", "ended_at", "last_seq"])
    insert_rows(events)
    for session in active:
        audit_record(
            project_id=session.project_id,
            environment=session.environment,
            actor=actor,
            action="session.end",
            detail={"session": session.id, "agent": session.agent},
        )
    return locked


def session_list(
    *,
    project: Project,
    environment: str,
    agent: str | None = None,
    status: str | None = None,
    cursor: str | None = None,
    limit: int = SESSION_PAGE_SIZE,
) -> tuple[list[Session], str | None]:
    """Sessions newest first (createdAt desc, then id), in keyset pages."""
    check_environment(environment)
    sessions = Session.objects.filter(project=project, environment=environment)
    if agent is not None:
        sessions = sessions.filter(agent=check_agent_id(agent))
    if status is not None:
        if status not in SessionStatus.values:
            raise InvalidRequest("status must be 'active' or 'ended'.")
        sessions = sessions.filter(status=status)
    return keyset_page(
        sessions.select_related("deployment"),
        order=("-created_at", "id"),
        cursor=cursor,
        scope=f"sessions:{project.id}:{environment}:{agent or ''}:{status or ''}",
        limit=limit,
    )


def check_after(value: object) -> int:
    """The `after` of an events page as every door receives it (text): a seq in ASCII
    digits, 0 to AFTER_MAX; InvalidInput (400) naming `after` otherwise."""
    return parse_int(value, field="after", maximum=AFTER_MAX)


def session_events(
    *, session: Session, after: int = 0, limit: int = EVENT_PAGE_SIZE
) -> list[SessionEvent]:
    """Events with seq above `after`, ascending, at most `limit`."""
    return list(session.events.filter(seq__gt=after).order_by("seq")[:limit])


def binding_documents_ensure(
    *, project: Project, environment: str, specs: list[BindingSpec], actor: str
) -> dict[str, bool]:
    """Creates each bound document that does not exist yet, titled after its id.

    Returns {resource: created} for the document bindings. A deleted id stays
    reserved: it fails here, before any session is created.
    """
    outcome: dict[str, bool] = {}
    for spec in specs:
        if spec.scope != "document":
            continue
        resource = resource_get(project=project, environment=environment, resource_id=spec.resource)
        if not keeps_documents(resource):
            raise InvalidMemoryBinding(spec.resource, "only document resources keep documents.")
        try:
            document_create(
                resource=resource, doc_id=spec.target_id, title=spec.target_id, actor=actor
            )
            outcome[spec.resource] = True
        except PreconditionFailed:
            try:
                document_get(resource=resource, doc_id=spec.target_id)
            except NotFound as exc:
                raise InvalidMemoryBinding(
                    spec.resource, f"document '{spec.target_id}' was deleted; use a new id."
                ) from exc
            outcome[spec.resource] = False
    return outcome
