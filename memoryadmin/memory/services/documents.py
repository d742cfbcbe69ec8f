"""Documents: create, read, list, replace, patch, delete and their versions.

Every conditional write is one UPDATE whose WHERE clause carries the
expected revision (and, for agents, the write policy), so the check and the
write cannot be separated by another writer. A row count of zero is then
explained by a second read: missing or deleted is 404, anything else 412.

The UPDATE returns the row it wrote (`RETURNING`). On PostgreSQL a replace's
version row and audit entry are inserted by the same statement
(data-modifying `WITH` clauses reading the updated row), so a replace is one
statement in its transaction; elsewhere they follow as two INSERTs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import DateTimeField, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.utils import timezone

from memoryadmin.core.cursors import KeysetPages, keyset_page
from memoryadmin.core.erasing import text_erase
from memoryadmin.core.errors import Conflict, InvalidRequest, NotFound, PreconditionFailed
from memoryadmin.core.rows import (
    column,
    columns,
    database_vendor,
    db_value,
    db_values,
    fetch_instance,
    fetch_row,
    instance,
    related_set,
    table,
)
from memoryadmin.memory.limits import (
    LIST_PAGE_SIZE,
    SUMMARY_MAX_BYTES,
    TITLE_MAX_BYTES,
    VERSION_PAGE_SIZE,
    agent_writes_shown,
    check_agent_writes,
    check_document_id,
    check_summary,
    check_text,
    check_title,
)
from memoryadmin.memory.models import Document, DocumentVersion, Resource, WriterKind
from memoryadmin.memory.services.audit import (
    AuditFacts,
    AuditGuard,
    ListenersPart,
    audit_insert,
    audit_listened,
    audit_write,
)
from memoryadmin.memory.services.document_filters import NO_FACETS, DocumentFacets

LIST_FIELDS = (
    "doc_id",
    "title",
    "summary",
    "agent_writes",
    "agent_review",
    "revision",
    "bytes",
    "updated_at",
    "writer_kind",
    "writer_session_id",
)


@dataclass(frozen=True)
class Writer:
    """Who commits a write: the owner (through any door) or an agent session,
    with where an agent's write came from."""

    kind: str = WriterKind.OWNER
    session_id: str = ""
    recall_id: str = ""
    call_id: str = ""
    proposal_id: str = ""

    def origin(self, actor: str) -> dict[str, str]:
        """A version's provenance: the actor ("user:", "key:", "cli:" or "agent:")
        and whatever the agent's write is traced by."""
        traced = {
            "actor": actor,
            "sessionId": self.session_id,
            "recallId": self.recall_id,
            "callId": self.call_id,
            "proposalId": self.proposal_id,
        }
        return {name: value for name, value in traced.items() if value}


OWNER = Writer()


class AgentWritesDisabled(Exception):
    """An agent save met a frozen document (callers turn it into a result)."""


def new_revision() -> str:
    return secrets.token_hex(10)


def documents_seen(rows: Iterable[tuple[str, ...]]) -> str:
    """A short fingerprint of the documents a confirmation showed (each an id, its
    revision and what it said would happen), carried by its form: a confirmation whose
    documents read differently when it is sent is shown again, never applied to
    documents the person did not see as they are."""
    digest = hashlib.sha256()
    for row in sorted(rows):
        digest.update("\0".join(row).encode("utf-8", "surrogatepass") + b"\n")
    return digest.hexdigest()[:32]


def _missing(resource: Resource, doc_id: str) -> NotFound:
    return NotFound(f"No document '{doc_id}' in resource '{resource.resource_id}'.")


def explain_no_rows(resource: Resource, doc_id: str, *, agent: bool = False) -> Exception:
    """Why a conditional write (or an agent's proposal) found no row to write: the
    document is gone (NotFound), frozen to an agent (AgentWritesDisabled) or at
    another revision (PreconditionFailed), in that order."""
    state = (
        Document.objects.filter(resource=resource, doc_id=doc_id)
        .values("deleted", "agent_writes")
        .first()
    )
    if state is None or state["deleted"]:
        return _missing(resource, doc_id)
    if agent and not state["agent_writes"]:
        return AgentWritesDisabled(doc_id)
    return PreconditionFailed(
        f"Document '{doc_id}' has changed since that revision; read it again and reconcile."
    )


def live_document_on(alias: str, resource: str) -> str:
    """The condition joining `alias` to the live document of `resource` (a column) whose
    id is the next parameter: what `document_get` reads, for a query that reads it
    with more (the API key's look-up of a document read)."""
    return (
        f"{alias}.{column(Document, 'resource')} = {resource}"
        f" AND {alias}.{column(Document, 'doc_id')} = %s"
        f" AND NOT {alias}.{column(Document, 'deleted')}"
    )


@functools.cache
def _live_document_sql(vendor: str) -> str:
    return (
        f"SELECT {columns(Document, 'd')} FROM {table(Document)} d"
        f" WHERE {live_document_on('d', '%s')}"
    )


# Not read with the request's key: document_get reads it.
UNREAD = object()


def document_get(*, resource: Resource, doc_id: str, read: object = UNREAD) -> Document:
    """The live document; `read` is what a query joined to `live_document_on` found
    (a Document or None), so the document is not read again."""
    check_document_id(doc_id)
    # Hand-written (one row by the unique key): the ORM would spend longer
    # composing this query than the database spends answering it.
    document = (
        fetch_instance(Document, _live_document_sql(database_vendor()), [resource.pk, doc_id])
        if read is UNREAD
        else read
    )
    if not isinstance(document, Document):
        raise _missing(resource, doc_id)
    # As select_related would: the caller's resource, not a second read (the document was
    # read by its key in that resource).
    related_set(document, "resource", resource)
    return document


# A document's time (`updated_at`, and the time of the version a write records) is Python's
# clock, as every time memoryadmin records, decided by the statement that writes the row,
# under its lock: the later of the clock and the time the document already has. A write that
# waited for the lock, or came from a server whose clock is behind, is never dated before
# the version it follows, which the as-of reads (they pick a version by its time) rely on.
@functools.cache
def _written_at_sql(vendor: str) -> str:
    """The time a document's UPDATE gives it; its parameter is the clock (`timezone.now()`)."""
    later = "GREATEST" if vendor == "postgresql" else "MAX"
    return f"{later}(%s, {column(Document, 'updated_at')})"


def _written_at() -> RawSQL:
    """`_written_at_sql` for an UPDATE the ORM composes."""
    now = db_value(Document, "updated_at", timezone.now())
    return RawSQL(_written_at_sql(database_vendor()), [now], DateTimeField())


@functools.cache
def version_copied() -> tuple[str, ...]:
    """What a version copies of its document: every field the two models share but their
    own id and creation time (a version is created when its document was updated)."""
    shared = {f.name for f in Document._meta.concrete_fields} - {"id", "created_at"}
    return tuple(f.name for f in DocumentVersion._meta.concrete_fields if f.name in shared)


def _record_version(document: Document, *, action: str, writer: Writer, actor: str) -> None:
    DocumentVersion.objects.create(
        document=document,
        **{name: getattr(document, name) for name in version_copied()},
        action=action,
        origin=writer.origin(actor),
        created_at=document.updated_at,
    )


def _facts(
    resource: Resource,
    doc_id: str,
    revision: str,
    *,
    actor: str,
    action: str,
    detail: dict[str, Any] | None = None,
) -> AuditFacts:
    """The audit entry of a write to one document."""
    return AuditFacts(
        project_id=resource.project_id,
        environment=resource.environment,
        actor=actor,
        action=action,
        resource_id=resource.resource_id,
        document_id=doc_id,
        revision=revision,
        detail=detail or {},
    )


def _audit(
    resource: Resource, document: Document, *, actor: str, action: str, **detail: Any
) -> None:
    audit_write(
        _facts(
            resource, document.doc_id, document.revision, actor=actor, action=action, detail=detail
        )
    )


@transaction.atomic
def document_create(
    *,
    resource: Resource,
    doc_id: str,
    title: str,
    text: str = "",
    summary: str = "",
    agent_writes: bool = True,
    agent_review: bool | None = None,
    actor: str,
) -> Document:
    check_document_id(doc_id)
    check_title(title)
    size = check_text(text, max_bytes=resource.max_bytes)
    check_summary(summary)
    now = timezone.now()
    try:
        # The unique (resource, id) key covers tombstones, so a deleted id
        # can never be created again, and two concurrent creates yield one.
        with transaction.atomic():
            document = Document.objects.create(
                resource=resource,
                doc_id=doc_id,
                title=title,
                text=text,
                summary=summary,
                agent_writes=agent_writes,
                agent_review=agent_review,
                revision=new_revision(),
                bytes=size,
                updated_at=now,
                created_at=now,
                writer_kind=WriterKind.OWNER,
            )
    except IntegrityError as exc:
        raise PreconditionFailed(
            f"Document id '{doc_id}' is already in use or was deleted; ids are never reused."
        ) from exc
    _record_version(document, action="create", writer=OWNER, actor=actor)
    _audit(resource, document, actor=actor, action="document.create", bytes=size)
    return document


@dataclass(frozen=True)
class Record:
    """What a conditional write records besides the row: a version and an audit entry."""

    actor: str
    action: str  # the audit action, e.g. "document.replace"
    detail: dict[str, Any]
    version: str | None = None  # the version's action, or None: no version row
    writer: Writer = OWNER


# A condition of a conditional write beyond its key and revision: a field and either
# None (equal to the next parameter) or whether it is NULL (`<field>__isnull` in a guard).
type Condition = tuple[str, bool | None]


def _conditions(
    require_agent_writes: bool, guard: dict[str, Any] | None
) -> tuple[tuple[Condition, ...], list[tuple[str, Any]]]:
    """The conditions of a write (their shape) and the values of those that take one."""
    shape: list[Condition] = []
    values: list[tuple[str, Any]] = []
    conditions = {"agent_writes": True} if require_agent_writes else {}
    for name, value in {**conditions, **(guard or {})}.items():
        if name.endswith("__isnull"):
            shape.append((name.removesuffix("__isnull"), bool(value)))
        else:
            shape.append((name, None))
            values.append((name, value))
    return tuple(shape), values


@functools.cache
def _update_statement(
    vendor: str,
    names: tuple[str, ...],
    shape: tuple[Condition, ...],
    listeners_guards: tuple[str, ...] = (),
) -> str:
    """`UPDATE ... SET <names> WHERE <key, revision, live, shape[, listeners' guards]>
    RETURNING <row>`: the same text for every write of one shape, built once (and
    prepared by the database)."""
    sets = ", ".join(
        f"{column(Document, name)} = " + (_written_at_sql(vendor) if name == "updated_at" else "%s")
        for name in names
    )
    where = " AND ".join(
        f"{column(Document, name)} = %s" for name in ("resource", "doc_id", "revision", "deleted")
    )
    for name, null in shape:
        test = "= %s" if null is None else "IS NULL" if null else "IS NOT NULL"
        where += f" AND {column(Document, name)} {test}"
    for condition in listeners_guards:
        where += f" AND {condition}"
    return f"UPDATE {table(Document)} SET {sets} WHERE {where} RETURNING {columns(Document)}"


def _update_sql(
    resource: Resource,
    doc_id: str,
    expected_revision: str,
    fields: dict[str, Any],
    *,
    require_agent_writes: bool,
    guard: dict[str, Any] | None,
    listeners_guards: Sequence[AuditGuard] = (),
) -> tuple[str, list[Any]]:
    """`UPDATE ... WHERE <key, revision, live[, agent writes][, listeners' guards]>
    RETURNING <row>`."""
    shape, conditions = _conditions(require_agent_writes, guard)
    names = tuple(fields)
    params = db_values(Document, names, fields.values())
    params += [resource.pk, doc_id, expected_revision, False]
    params += db_values(Document, [name for name, _ in conditions], [v for _, v in conditions])
    for listener_guard in listeners_guards:
        params += listener_guard.params
    conditions_sql = tuple(listener_guard.sql for listener_guard in listeners_guards)
    return _update_statement(database_vendor(), names, shape, conditions_sql), params


def _records_in_update_statement() -> bool:
    """Whether a recorded write's version, audit entry and deliveries ride on its
    UPDATE as `WITH` clauses (PostgreSQL's data-modifying CTEs)."""
    return database_vendor() == "postgresql"


@functools.cache
def _version_clause(vendor: str) -> str:
    """The `WITH` clause inserting the version of the row `updated` returns; its
    parameters are the version's action and origin."""
    copied = version_copied()
    names = ["document_id", *copied, "action", "origin", "created_at"]
    targets = ", ".join(column(DocumentVersion, n) for n in names)
    sources = [column(Document, "id"), *(column(Document, c) for c in copied), "%s", "%s"]
    sources.append(column(Document, "updated_at"))
    return (
        f", version AS (INSERT INTO {table(DocumentVersion)} ({targets})"
        f" SELECT {', '.join(sources)} FROM updated)"
    )


def _with_records(
    update: Callable[..., tuple[str, list[Any]]], record: Record, part: ListenersPart
) -> tuple[Any, ...] | None:
    """The UPDATE (`update`: `_update_sql` with the write's arguments), plus its version
    row, audit entry and the audit listeners' part (webhook deliveries and their jobs, or
    the guards that stand for them among the UPDATE's conditions), as one PostgreSQL
    statement (`audit_listened` runs it); its row, None when nothing was written."""
    vendor = database_vendor()
    sql, params = update(listeners_guards=part.guards)
    parts = [f"WITH updated AS ({sql})"]
    if record.version is not None:
        parts.append(_version_clause(vendor))
        origin = record.writer.origin(record.actor)
        params += [record.version, db_value(DocumentVersion, "origin", origin)]
    audit_sql, audit_params = audit_insert(part.facts, source="updated")
    clauses, clauses_params = part.clauses()
    parts += [f", audit AS ({audit_sql})", clauses]
    parts.append(f" SELECT {columns(Document)}{part.selected()} FROM updated")
    return fetch_row("".join(parts), [*params, *audit_params, *clauses_params])


def _conditional_update(
    resource: Resource,
    doc_id: str,
    expected_revision: str,
    fields: dict[str, Any],
    *,
    require_agent_writes: bool = False,
    guard: dict[str, Any] | None = None,
    record: Record | None = None,
) -> Document:
    """Writes `fields` if the revision still matches; with `record`, records the write
    (its version and audit entry) too."""
    revision = new_revision()
    # The clock, which the UPDATE makes the document's time unless its time is later.
    fields = {**fields, "revision": revision, "updated_at": timezone.now()}
    update = functools.partial(
        _update_sql,
        resource,
        doc_id,
        expected_revision,
        fields,
        require_agent_writes=require_agent_writes,
        guard=guard,
    )
    together = record is not None and _records_in_update_statement()
    if record is not None and together:
        facts = _facts(
            resource,
            doc_id,
            revision,
            actor=record.actor,
            action=record.action,
            detail=record.detail,
        )
        row = audit_listened(
            facts, source="updated", write=lambda part: _with_records(update, record, part)
        )
    else:
        row = fetch_row(*update())
    if row is None:
        raise explain_no_rows(resource, doc_id, agent=require_agent_writes)
    # The row is ours until commit (locked on PostgreSQL, the database on SQLite).
    document = instance(Document, row)
    if record is not None and not together:
        if record.version is not None:
            _record_version(
                document, action=record.version, writer=record.writer, actor=record.actor
            )
        _audit(resource, document, actor=record.actor, action=record.action, **record.detail)
    return document


def _one_statement_or_atomic() -> Any:
    """What a replace runs in: where its writes are one statement (`_with_records`),
    atomic by itself (no BEGIN and COMMIT of its own); elsewhere a transaction."""
    if _records_in_update_statement():
        return contextlib.nullcontext()
    return transaction.atomic()


def document_replace(
    *,
    resource: Resource,
    doc_id: str,
    expected_revision: str,
    text: str,
    summary: str | None = None,
    actor: str,
    writer: Writer = OWNER,
    action: str = "replace",
    guard: dict[str, Any] | None = None,
) -> Document:
    """Replaces text (and summary when given) if the revision still matches.

    Agent writers also need agent writes enabled, checked in the same
    statement, so a freeze that committed first always wins. `guard` adds
    conditions of the same kind (the review setting an agent save was
    judged under).
    """
    check_document_id(doc_id)
    size = check_text(text, max_bytes=resource.max_bytes)
    fields: dict[str, Any] = {
        "text": text,
        "bytes": size,
        "writer_kind": writer.kind,
        "writer_session_id": writer.session_id,
    }
    if summary is not None:
        fields["summary"] = check_summary(summary)
    # An approved proposal is the owner's decision, not an agent save.
    is_agent = writer.kind == WriterKind.AGENT and not writer.proposal_id
    # An approved proposal's write names it (in its audit entry and its webhook events).
    detail: dict[str, Any] = {"bytes": size}
    if writer.proposal_id:
        detail["proposalId"] = writer.proposal_id
    record = Record(
        actor=actor,
        action=f"document.{action}",
        detail=detail,
        version=action,
        writer=writer,
    )
    with _one_statement_or_atomic():
        return _conditional_update(
            resource,
            doc_id,
            expected_revision,
            fields,
            require_agent_writes=is_agent,
            guard=guard,
            record=record,
        )


@transaction.atomic
def document_patch(
    *,
    resource: Resource,
    doc_id: str,
    expected_revision: str,
    title: str | None = None,
    agent_writes: bool | None = None,
    agent_review: bool | None = None,
    actor: str,
) -> Document:
    """Changes title and write mode; `agent_review` None leaves review as it is.

    Audited as what it changed (each entry raises its webhook events): a freeze or
    unfreeze where agent writes turned off or on (`document.freeze`,
    `document.unfreeze`), and beside it `document.patch` where a title was given,
    `document.review` where whether saves are reviewed changed; a patch that changed
    neither is still a new revision, `document.patch`."""
    check_document_id(doc_id)
    fields: dict[str, Any] = {}
    if title is not None:
        fields["title"] = check_title(title)
    if agent_writes is not None:
        fields["agent_writes"] = agent_writes
    if agent_review is not None:
        fields["agent_review"] = agent_review
    if not fields:
        raise InvalidRequest("A patch needs title, agentWrites or both.")
    # The document at the revision the patch is conditional on: its write mode before
    # (the revision, a random token, pins it: the write below is conditional on it too).
    before = (
        Document.objects.filter(
            resource=resource, doc_id=doc_id, revision=expected_revision, deleted=False
        )
        .values("agent_writes", "agent_review")
        .first()
    )
    if before is None:
        raise explain_no_rows(resource, doc_id)
    # A patch is an owner write: it changes the revision and the last writer.
    fields.update(writer_kind=WriterKind.OWNER, writer_session_id="")
    document = _conditional_update(resource, doc_id, expected_revision, fields)
    _record_version(document, action="patch", writer=OWNER, actor=actor)
    shown = agent_writes_shown(
        agent_writes=document.agent_writes,
        agent_review=document.agent_review,
        default=resource.review_default,
    )

    def reviewed(review: bool | None) -> bool:
        return review if review is not None else resource.review_default

    entries: list[tuple[str, dict[str, Any]]] = []
    if before["agent_writes"] != document.agent_writes:
        freeze = "document.unfreeze" if document.agent_writes else "document.freeze"
        entries.append((freeze, {"agentWrites": shown}))
    review_changed = reviewed(before["agent_review"]) != reviewed(document.agent_review)
    changes: dict[str, Any] = {}
    if title is not None:
        changes["title"] = title
    if agent_writes is not None and (review_changed or not entries):
        changes["agentWrites"] = shown
    if title is None and review_changed:
        entries.append(("document.review", changes))
    elif title is not None or not entries:
        entries.append(("document.patch", changes))
    for action, detail in entries:
        _audit(resource, document, actor=actor, action=action, **detail)
    return document


@transaction.atomic
def document_set_agent_writes(
    *, resource: Resource, doc_id: str, enabled: bool, actor: str
) -> tuple[Document, bool]:
    """Freezes or unfreezes a document whatever its revision; says whether it changed.

    A policy change needs no revision check: it must not fail because an
    unrelated edit moved the revision (documents_set_agent_writes)."""
    check_document_id(doc_id)
    changed = documents_set_agent_writes(
        resource=resource, doc_ids=[doc_id], enabled=enabled, actor=actor
    )
    return document_get(resource=resource, doc_id=doc_id), bool(changed)


@transaction.atomic
def documents_set_agent_writes(
    *, resource: Resource, doc_ids: Sequence[str], enabled: bool, actor: str
) -> list[str]:
    """Freezes or unfreezes live documents of a resource in a few statements whatever
    their number (one an incident freezes, or many); returns the ids that changed.

    Their rows are locked and written in one UPDATE, with a version and an audit entry
    (`document.freeze` / `document.unfreeze`) each: a freeze that has returned wins over
    every agent save that commits after it (a save's conditional UPDATE waits for the lock
    and then finds another revision)."""
    rows = list(
        Document.objects.select_for_update()
        .filter(resource=resource, doc_id__in=list(doc_ids), deleted=False)
        .exclude(agent_writes=enabled)
        .order_by("id")
    )
    if not rows:
        return []
    now = timezone.now()
    for document in rows:
        document.resource = resource
        document.agent_writes, document.revision = enabled, new_revision()
        # The later of the clock and the document's time, as `_written_at_sql` decides it
        # in a statement: the row is locked and its time read, so it is decided here.
        document.updated_at = max(now, document.updated_at)
        document.writer_kind, document.writer_session_id = WriterKind.OWNER, ""
    fields = ["agent_writes", "revision", "updated_at", "writer_kind", "writer_session_id"]
    Document.objects.bulk_update(rows, fields)
    DocumentVersion.objects.bulk_create(
        DocumentVersion(
            document=document,
            revision=document.revision,
            writer_kind=OWNER.kind,
            writer_session_id="",
            title=document.title,
            summary=document.summary,
            text=document.text,
            bytes=document.bytes,
            agent_writes=enabled,
            action="patch",
            origin=OWNER.origin(actor),
            created_at=document.updated_at,
        )
        for document in rows
    )
    action = "document.unfreeze" if enabled else "document.freeze"
    for document in rows:
        _audit(resource, document, actor=actor, action=action)
    return [document.doc_id for document in rows]


@transaction.atomic
def document_set_review(
    *, resource: Resource, doc_id: str, review: bool | None, actor: str
) -> tuple[Document, bool]:
    """Sends this document's agent saves to review (True), lets them through (False)
    or lets the resource's manifest decide (None), whatever its revision; says
    whether it changed. Like a freeze, one UPDATE: a save that commits after it
    returned is judged under the new setting."""
    check_document_id(doc_id)
    rows = Document.objects.filter(resource=resource, doc_id=doc_id, deleted=False)
    rows = (
        rows.exclude(agent_review__isnull=True)
        if review is None
        else rows.filter(Q(agent_review__isnull=True) | ~Q(agent_review=review))
    )
    changed = rows.update(
        agent_review=review,
        revision=new_revision(),
        updated_at=_written_at(),
        writer_kind=WriterKind.OWNER,
        writer_session_id="",
    )
    document = document_get(resource=resource, doc_id=doc_id)
    if changed:
        _record_version(document, action="review", writer=OWNER, actor=actor)
        shown = agent_writes_shown(
            agent_writes=document.agent_writes,
            agent_review=document.agent_review,
            default=resource.review_default,
        )
        _audit(resource, document, actor=actor, action="document.review", agentWrites=shown)
    return document, bool(changed)


@transaction.atomic
def document_set_write_mode(
    *, resource: Resource, doc_id: str, mode: str, actor: str
) -> tuple[Document, bool]:
    """Puts a document in one write mode (check_agent_writes) whatever its revision,
    as a freeze or unfreeze and a review change would, with their versions and audit
    entries; says whether it changed. Disabled keeps whether it is reviewed."""
    mode = check_agent_writes(mode)
    document, changed = document_set_agent_writes(
        resource=resource, doc_id=doc_id, enabled=mode != "disabled", actor=actor
    )
    shown = agent_writes_shown(
        agent_writes=document.agent_writes,
        agent_review=document.agent_review,
        default=resource.review_default,
    )
    if shown != mode:
        document, reviewed = document_set_review(
            resource=resource, doc_id=doc_id, review=mode == "review", actor=actor
        )
        changed = changed or reviewed
    return document, changed


@transaction.atomic
def document_delete(*, resource: Resource, doc_id: str, expected_revision: str, actor: str) -> None:
    """Wipes a document's content, and its proposals' (the pending ones rejected), and
    keeps its id reserved forever."""
    # The proposals module builds on this one.
    from memoryadmin.memory.services.proposals import proposals_close

    check_document_id(doc_id)
    fields = {"deleted": True, "title": "", "text": "", "summary": "", "bytes": 0}
    document = _conditional_update(resource, doc_id, expected_revision, fields)
    DocumentVersion.objects.filter(document=document).update(title="", summary="", text="")
    _audit(resource, document, actor=actor, action="document.delete")
    proposals_close(document=document, actor=actor)


def _clip(value: str, max_bytes: int) -> str:
    return value.encode()[:max_bytes].decode(errors="ignore")


def document_erase_text(*, document: Document, needles: Sequence[str], actor: str) -> Document:
    """The document with the text replaced, as a new owner version (`erase`), audited
    `document.erase` (an update to webhook endpoints). Title and summary keep their
    limits; the text may grow past its resource's by the marker's length only."""
    title = _clip(text_erase(document.title, needles)[0], TITLE_MAX_BYTES)
    summary = _clip(text_erase(document.summary, needles)[0], SUMMARY_MAX_BYTES)
    text = text_erase(document.text, needles)[0]
    size = len(text.encode())
    fields = {
        "title": title,
        "summary": summary,
        "text": text,
        "bytes": size,
        "writer_kind": OWNER.kind,
        "writer_session_id": "",
    }
    record = Record(actor=actor, action="document.erase", detail={"bytes": size}, version="erase")
    return _conditional_update(
        document.resource, document.doc_id, document.revision, fields, record=record
    )


# The list's orders: each a keyset order ending in a unique tie-breaker (the id).
DOCUMENT_SORTS: dict[str, tuple[str] | tuple[str, str]] = {
    "updated": ("-updated_at", "doc_id"),
    "id": ("doc_id",),
    "size": ("-bytes", "doc_id"),
}


def document_list(
    *,
    resource: Resource,
    cursor: str | None = None,
    limit: int = LIST_PAGE_SIZE,
    query: str = "",
    sort: str = "updated",
    facets: DocumentFacets = NO_FACETS,
) -> tuple[list[dict[str, Any]], str | None]:
    """One keyset page of live documents (without text) in `sort` order: "updated"
    (newest first, the default), "id" (ascending) or "size" (largest first); ties by id.

    A `query` keeps the documents whose id starts with it or whose title
    contains it, ignoring case. The filter rides on the keyset walk, so a
    page stops reading at its 50th match instead of counting every match.
    `facets` narrow it further (document_filters). A cursor belongs to its order and
    facets: one from another order or other facets is refused.
    """
    order = DOCUMENT_SORTS.get(sort)
    if order is None:
        raise InvalidRequest(f"sort must be one of: {', '.join(DOCUMENT_SORTS)}.")
    scope = f"documents:{resource.pk}" + ("" if sort == "updated" else f":{sort}")
    if not query and not facets.narrowed:
        return _list_pages(sort, limit).page(resource.pk, cursor=cursor, scope=scope)
    rows = documents_matching(resource=resource, query=query, facets=facets)
    if facets.narrowed:
        scope += f":{facets.scope}"
    return keyset_page(
        rows.values(*LIST_FIELDS), order=order, cursor=cursor, scope=scope, limit=limit
    )


@functools.lru_cache(maxsize=16)
def _list_pages(sort: str, limit: int) -> KeysetPages:
    """The unfiltered list's pages in `sort` order (the API's list and the Memory page
    without a filter): its statements composed once per process, as the filtered list
    composes its own on each call (`documents_matching`, `keyset_page`)."""
    return KeysetPages(
        lambda resource_pk: documents_matching(resource=Resource(pk=resource_pk)),
        [int],
        model=Document,
        names=LIST_FIELDS,
        order=DOCUMENT_SORTS[sort],
        limit=limit,
    )


def _sqlite_substring_candidates(resource: Resource, query: str) -> RawSQL:
    """The resource's live documents whose id or title contains `query` in any case,
    from the search's FTS5 trigram table (memoryadmin/memory/migrations/0007): a
    superset of the filter's matches (FTS5 folds case beyond ASCII), which the LIKE
    conditions then narrow, so a rare term does not read every row of the resource.
    Trigrams need at least three characters."""
    phrase = '"' + query.replace('"', '""') + '"'
    match = f'scope : "<{resource.pk}>" AND {{doc_id title}} : {phrase}'
    return RawSQL(
        "SELECT rowid FROM memory_document_trigram WHERE memory_document_trigram MATCH %s",
        [match],
    )


def documents_matching(
    *, resource: Resource, query: str = "", facets: DocumentFacets = NO_FACETS
) -> QuerySet[Document]:
    """The live documents of `resource` that the list's filter (`query`: id prefix or
    part of the title, ignoring case) and `facets` keep, unordered."""
    rows = Document.objects.live().filter(resource=resource)
    if query:
        rows = rows.filter(Q(doc_id__istartswith=query) | Q(title__icontains=query))
        if database_vendor() == "sqlite" and len(query) >= 3:
            rows = rows.filter(pk__in=_sqlite_substring_candidates(resource, query))
    if facets.narrowed:
        rows = rows.filter(facets.condition(resource))
    return rows


def document_count(
    *, resource: Resource, query: str = "", facets: DocumentFacets = NO_FACETS
) -> int:
    """How many live documents of `resource` the list's filter and facets keep (one COUNT)."""
    return documents_matching(resource=resource, query=query, facets=facets).count()


def document_restore(
    *,
    resource: Resource,
    doc_id: str,
    revision: str,
    expected_revision: str,
    actor: str,
) -> Document:
    """Makes an old version's text and summary current again (a replace under
    `expected_revision`); 409 for a redacted version.

    The document's row is locked before the version is read, as a redaction locks it
    before it redacts: a redaction that committed first is seen (409), one that comes
    later waits for the restore and finds the version no longer the one written last.
    Read before the lock, the version's text could be written after its redaction
    committed. Inside a caller's transaction (a revert's, a containment's) the lock is
    held until it commits; on its own the restore is one transaction."""
    check_document_id(doc_id)
    with contextlib.nullcontext() if connection.in_atomic_block else transaction.atomic():
        locked = (
            Document.objects.select_for_update()
            .filter(resource=resource, doc_id=doc_id, deleted=False)
            .values_list("pk", flat=True)
            .first()
        )
        if locked is None:
            raise _missing(resource, doc_id)
        version = DocumentVersion.objects.filter(document_id=locked, revision=revision).first()
        if version is None:
            raise NotFound(f"Document '{doc_id}' has no version '{revision}'.")
        if version.redacted_at is not None:
            raise Conflict(f"Version {revision} was redacted; there is nothing to restore.")
        return document_replace(
            resource=resource,
            doc_id=doc_id,
            expected_revision=expected_revision,
            text=version.text,
            summary=version.summary,
            actor=actor,
            action="restore",
        )


def version_get(*, document: Document, revision: str) -> DocumentVersion:
    version = DocumentVersion.objects.filter(document=document, revision=revision).first()
    if version is None:
        raise NotFound(f"Document '{document.doc_id}' has no version '{revision}'.")
    return version


def version_list(
    *, document: Document, cursor: str | None = None, limit: int = VERSION_PAGE_SIZE
) -> tuple[list[DocumentVersion], str | None]:
    """Versions newest first, in keyset pages."""
    return keyset_page(
        DocumentVersion.objects.filter(document=document),
        order=("-id",),
        cursor=cursor,
        scope=f"versions:{document.pk}",
        limit=limit,
    )
