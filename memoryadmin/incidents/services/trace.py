"""The taint graph of a memory incident, hop by hop, from the evidence provenance keeps.

Hop 0 is the source: the versions a session, an API key or an owner wrote, one
version, or every version holding an exact text (and, for a session, what it
wrote through providers' tools). Each further hop follows the recalls that
showed a tainted version or record to a model (recall sources, and the records
a recall's projection names), the sessions of those recalls, and what those
sessions wrote from their first such recall on: document versions, pending
proposals, and records stored through external or http providers' tools
(`record.saved` events). A session that never recalled anything tainted is not
in the graph.

Every hop is a few set-based queries over the whole frontier (never one per
node), chunked to stay within the databases' parameter limits.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Q, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from memoryadmin.agents.errors import SessionNotFound
from memoryadmin.agents.models import (
    EventType,
    OperationAction,
    ProviderOperation,
    Recall,
    RecallSource,
    Session,
    SessionEvent,
)
from memoryadmin.agents.services.operations import UNSETTLED
from memoryadmin.core.environments import check_environment
from memoryadmin.core.errors import InvalidRequest, NotFound
from memoryadmin.core.inputs import parse_int
from memoryadmin.core.rows import NotBlank
from memoryadmin.core.strings import string_check
from memoryadmin.memory.models import (
    ApiKey,
    DocumentVersion,
    Project,
    Proposal,
    ProposalState,
    Resource,
)
from memoryadmin.memory.representations import iso_ms

HOPS_DEFAULT = 3
HOPS_MAX = 10
TITLE_MAX = 200
TEXT_MAX = 1000
ID_MAX = 128
# A graph past this many nodes is refused: narrow the source or the hops.
NODES_MAX = 50_000
# Values per IN list (SQLite's default limit is far above; PostgreSQL has none).
CHUNK = 500
# Record ids per text match of recall projections.
RECORD_CHUNK = 50
SOURCE_KINDS = ("session", "version", "apiKey", "text")
KIND_ORDER = {"session": 0, "version": 1, "record": 2, "recall": 3}


class IncidentTooLarge(InvalidRequest):
    code = "incident_too_large"


def _written_at(data: dict[str, Any], at: datetime) -> datetime:
    """When a `record.saved` write was made: a write the provider finished later was made
    when it accepted it (`acceptedAt`), not when the event was written."""
    accepted = data.get("acceptedAt")
    try:
        made = datetime.fromisoformat(accepted) if isinstance(accepted, str) else None
    except ValueError:
        made = None
    return at if made is None or made.tzinfo is None else min(made, at)


def _chunks[T](values: Iterable[T], size: int = CHUNK) -> Iterator[list[T]]:
    items = list(values)
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _string(value: object, *, field: str, maximum: int) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"{field} is required: a nonempty string.", details={"field": field})
    string_check(value, field=field)
    if len(value) > maximum:
        raise InvalidRequest(f"{field} is over {maximum} characters.", details={"field": field})
    return value


def check_title(value: object) -> str:
    title = _string(value, field="title", maximum=TITLE_MAX).strip()
    if not title:
        raise InvalidRequest("title must not be blank.", details={"field": "title"})
    return title


def check_hops(value: object) -> int:
    if value is None:
        return HOPS_DEFAULT
    return parse_int(value, field="hops", minimum=0, maximum=HOPS_MAX)


def check_source(value: object) -> dict[str, Any]:
    """One of {"session": id}, {"version": {resource, document, revision}},
    {"apiKey": prefix}, {"text": exact text}."""
    kinds = ", ".join(SOURCE_KINDS)
    if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in SOURCE_KINDS:
        raise InvalidRequest(
            f"source is required: an object with exactly one of {kinds}.",
            details={"field": "source"},
        )
    ((kind, raw),) = value.items()
    if kind == "version":
        if not isinstance(raw, dict) or set(raw) != {"resource", "document", "revision"}:
            raise InvalidRequest(
                "source.version is an object of resource, document and revision.",
                details={"field": "source.version"},
            )
        return {
            "version": {
                name: _string(raw[name], field=f"source.version.{name}", maximum=ID_MAX)
                for name in ("resource", "document", "revision")
            }
        }
    maximum = TEXT_MAX if kind == "text" else ID_MAX
    return {kind: _string(raw, field=f"source.{kind}", maximum=maximum)}


# Node ids: stable across traces, so a graph can be compared and linked.
def version_node_id(resource: str, document: str, revision: str) -> str:
    return f"version:{resource}/{document}@{revision}"


def proposal_node_id(proposal: str) -> str:
    return f"proposal:{proposal}"


def record_node_id(resource: str, record: str) -> str:
    return f"record:{resource}/{record}"


@dataclass
class _Write:
    """A tainted write, keyed for the next hop's look-up of its readers."""

    node: str
    # (resource pk, document id, revision) of a version; (resource pk, record id) of a record.
    key: tuple[Any, ...]
    at: datetime


@dataclass
class Trace:
    project: Project
    environment: str
    resources: dict[int, Resource]
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    edges: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    # Each tainted session and the time of its first tainted recall (None: the
    # source session, all of whose writes count).
    tainted_at: dict[str, datetime | None] = field(default_factory=dict)

    def add(self, node_id: str, kind: str, hop: int, **fields: Any) -> bool:
        if node_id in self.nodes:
            return False
        if len(self.nodes) >= NODES_MAX:
            raise IncidentTooLarge(
                f"The trace reaches more than {NODES_MAX} nodes; narrow the source or lower hops.",
                details={"nodesMax": NODES_MAX},
            )
        self.nodes[node_id] = {"id": node_id, "kind": kind, "hop": hop, **fields}
        return True

    def link(self, source: str, target: str, *, recall: str | None, at: datetime) -> None:
        self.edges.setdefault(
            (source, target),
            {"from": source, "to": target, "evidence": {"recall": recall, "at": iso_ms(at)}},
        )

    def graph(self) -> dict[str, Any]:
        nodes = sorted(
            self.nodes.values(), key=lambda n: (n["hop"], KIND_ORDER[n["kind"]], n["id"])
        )
        edges = sorted(self.edges.values(), key=lambda e: (e["from"], e["to"]))
        return {"nodes": nodes, "edges": edges}

    # Writes.

    def version_rows(self, rows: Iterable[tuple[Any, ...]], hop: int) -> list[_Write]:
        """Version nodes of (resource pk, doc id, revision, writer session, origin, at) rows."""
        found = []
        for resource_pk, doc_id, revision, writer_session, origin, at in rows:
            resource = self.resources[resource_pk].resource_id
            node = version_node_id(resource, doc_id, revision)
            actor = origin.get("actor", "") if isinstance(origin, dict) else ""
            if self.add(
                node,
                "version",
                hop,
                resource=resource,
                document=doc_id,
                revision=revision,
                session=writer_session or None,
                writer=actor,
                createdAt=iso_ms(at),
            ):
                found.append(_Write(node, (resource_pk, doc_id, revision), at))
            if writer_session and f"session:{writer_session}" in self.nodes:
                recall = origin.get("recallId") if isinstance(origin, dict) else None
                self.link(f"session:{writer_session}", node, recall=recall, at=at)
        return found

    def session_writes(self, sessions: dict[str, datetime | None], hop: int) -> list[_Write]:
        """What these sessions wrote from their taint time on: versions, pending proposals,
        records. Three queries per chunk of sessions, whatever their number."""
        found: list[_Write] = []
        resource_pks = list(self.resources)
        for ids in _chunks(sessions):
            since = [t for t in (sessions[s] for s in ids) if t is not None]
            earliest = min(since) if len(since) == len(ids) else None

            def after(session_id: str, at: datetime) -> bool:
                start = sessions[session_id]
                return start is None or at >= start

            versions = DocumentVersion.objects.filter(
                NotBlank("writer_session_id"),
                writer_session_id__in=ids,
                document__resource_id__in=resource_pks,
            )
            proposals = Proposal.objects.filter(
                session_id__in=ids,
                document__resource_id__in=resource_pks,
                state=ProposalState.PENDING,
                expires_at__gt=timezone.now(),
            )
            events = SessionEvent.objects.filter(session_id__in=ids, type=EventType.RECORD_SAVED)
            unsettled = (
                ProviderOperation.objects.filter(
                    session_id__in=ids, resource_id__in=resource_pks, state__in=UNSETTLED
                )
                .exclude(action=OperationAction.DELETE)
                .select_related("resource")
            )
            if earliest is not None:
                versions = versions.filter(created_at__gte=earliest)
                proposals = proposals.filter(created_at__gte=earliest)
                events = events.filter(created_at__gte=earliest)
                unsettled = unsettled.filter(created_at__gte=earliest)
            # Read before the events: an operation that succeeds in between is then seen
            # as both, and its event wins.
            pending = [
                o for o in unsettled.order_by("id") if after(o.session_id or "", o.created_at)
            ]
            rows = versions.order_by("id").values_list(
                "document__resource_id",
                "document__doc_id",
                "revision",
                "writer_session_id",
                "origin",
                "created_at",
            )
            found += self.version_rows((r for r in rows if after(r[3], r[5])), hop)
            for pid, resource_pk, doc_id, session_id, recall_id, at in proposals.values_list(
                "id",
                "document__resource_id",
                "document__doc_id",
                "session_id",
                "recall_id",
                "created_at",
            ):
                if not after(session_id, at):
                    continue
                node = proposal_node_id(pid)
                # A pending proposal is shown to no model: nothing reads it onward.
                self.add(
                    node,
                    "version",
                    hop,
                    resource=self.resources[resource_pk].resource_id,
                    document=doc_id,
                    revision=None,
                    proposal=pid,
                    session=session_id,
                    createdAt=iso_ms(at),
                )
                self.link(f"session:{session_id}", node, recall=recall_id or None, at=at)
            by_id = {r.resource_id: pk for pk, r in self.resources.items()}
            saved: set[object] = set()
            for session_id, data, at in events.order_by("id").values_list(
                "session_id", "data", "created_at"
            ):
                if (
                    not after(session_id, _written_at(data, at))
                    or data.get("resource") not in by_id
                ):
                    continue
                resource_pk = by_id[data["resource"]]
                ids_written = [i for i in data.get("recordIds") or [] if isinstance(i, str)]
                # A write whose provider named no record is traced by its call.
                for record in ids_written or [f"call:{data.get('callId', '')}"]:
                    node = record_node_id(data["resource"], record)
                    if (
                        self.add(
                            node,
                            "record",
                            hop,
                            resource=data["resource"],
                            namespace=data.get("namespace", ""),
                            recordId=record if ids_written else None,
                            tool=data.get("tool", ""),
                            callId=data.get("callId", ""),
                            session=session_id,
                            createdAt=iso_ms(at),
                        )
                        and ids_written
                    ):
                        found.append(_Write(node, (resource_pk, record), at))
                    self.link(f"session:{session_id}", node, recall=data.get("recallId"), at=at)
                saved.add(data.get("operation"))
            for operation in pending:
                if operation.id not in saved:
                    self.pending_write(operation, hop)
        return found

    def pending_write(self, operation: ProviderOperation, hop: int) -> None:
        """A write of a tainted session that its provider has not finished (accepted, or
        its outcome unknown): a record node named by its operation, which containment
        resolves to the records once the operation has succeeded (its `record.saved`).
        No model can have read it yet, so nothing follows from it."""
        resource = operation.resource.resource_id
        node = record_node_id(resource, f"operation:{operation.id}")
        self.add(
            node,
            "record",
            hop,
            resource=resource,
            namespace=operation.namespace,
            recordId=None,
            tool=operation.tool,
            callId=operation.call_id,
            session=operation.session_id,
            operation=operation.id,
            pending=True,
            createdAt=iso_ms(operation.created_at),
        )
        self.link(
            f"session:{operation.session_id}",
            node,
            recall=operation.recall_id or None,
            at=operation.created_at,
        )

    # Readers.

    def readers(self, writes: list[_Write], hop: int) -> dict[str, datetime]:
        """Recall nodes of every recall that showed one of `writes` to a model, linked to
        their sessions; returns each reading session's earliest such recall."""
        read: dict[str, tuple[datetime, str]] = {}
        versions = {w.key: w for w in writes if len(w.key) == 3}
        records = {w.key: w for w in writes if len(w.key) == 2}
        for chunk in _chunks(versions):
            rows = RecallSource.objects.filter(
                resource_id__in={k[0] for k in chunk}, revision__in=[k[2] for k in chunk]
            ).values_list(
                "resource_id",
                "doc_id",
                "revision",
                "recall_id",
                "recall__session_id",
                "recall__created_at",
            )
            for resource_pk, doc_id, revision, recall_id, session_id, at in rows:
                write = versions.get((resource_pk, doc_id, revision))
                if write is not None:
                    self._read(write, recall_id, session_id, at, hop, read)
        for pairs in _chunks(records, RECORD_CHUNK):
            matches = Q()
            for _, record in pairs:
                matches |= Q(raw__contains=record)
            recalls = (
                Recall.objects.filter(
                    session__project=self.project,
                    session__environment=self.environment,
                    created_at__gte=min(records[k].at for k in pairs),
                )
                .annotate(raw=Cast("memory", TextField()))
                .filter(matches)
                .values_list("id", "session_id", "created_at", "memory")
            )
            for recall_id, session_id, at, memory in recalls:
                for key in pairs:
                    resource = self.resources[key[0]].resource_id
                    shown = (memory or {}).get(resource)
                    sources = shown.get("sources", []) if isinstance(shown, dict) else []
                    if at >= records[key].at and any(s.get("id") == key[1] for s in sources):
                        self._read(records[key], recall_id, session_id, at, hop, read)
        return {session: at for session, (at, _) in read.items()}

    def _read(
        self,
        write: _Write,
        recall_id: str,
        session_id: str,
        at: datetime,
        hop: int,
        read: dict[str, tuple[datetime, str]],
    ) -> None:
        node = f"recall:{recall_id}"
        self.add(node, "recall", hop, session=session_id, createdAt=iso_ms(at))
        self.link(write.node, node, recall=recall_id, at=at)
        self.link(node, f"session:{session_id}", recall=recall_id, at=at)
        earliest = read.get(session_id)
        if earliest is None or at < earliest[0]:
            read[session_id] = (at, recall_id)

    def taint(self, read: dict[str, datetime], hop: int) -> dict[str, datetime | None]:
        """Adds the reading sessions; returns those whose taint starts earlier than known
        (new ones included), with the time their writes count from."""
        new = [s for s in read if s not in self.tainted_at]
        for ids in _chunks(new):
            rows = Session.objects.filter(pk__in=ids).values_list("id", "agent", "status")
            for session_id, agent, status in rows:
                self.add(f"session:{session_id}", "session", hop, agent=agent, status=status)
        changed: dict[str, datetime | None] = {}
        for session_id, at in read.items():
            known = self.tainted_at.get(session_id, at)
            if session_id not in self.tainted_at or (known is not None and at < known):
                self.tainted_at[session_id] = at
                changed[session_id] = at
        return changed


def _resource(trace: Trace, resource_id: str) -> Resource:
    for resource in trace.resources.values():
        if resource.resource_id == resource_id:
            return resource
    raise NotFound(f"No resource '{resource_id}' in {trace.environment}.")


_VERSION_FIELDS = (
    "document__resource_id",
    "document__doc_id",
    "revision",
    "writer_session_id",
    "origin",
    "created_at",
)


def _sources(trace: Trace, source: dict[str, Any]) -> list[_Write]:
    """Hop 0: the source's versions (and for a session, everything it wrote)."""
    ((kind, value),) = source.items()
    versions = DocumentVersion.objects.filter(document__resource_id__in=list(trace.resources))
    if kind == "session":
        found = Session.objects.filter(
            pk=value, project=trace.project, environment=trace.environment
        ).first()
        if found is None:
            raise SessionNotFound(f"No session '{value}' in {trace.environment}.")
        trace.add(f"session:{found.id}", "session", 0, agent=found.agent, status=found.status)
        trace.tainted_at[found.id] = None
        return trace.session_writes({found.id: None}, 0)
    if kind == "version":
        resource = _resource(trace, value["resource"])
        rows = versions.filter(
            document__resource=resource,
            document__doc_id=value["document"],
            revision=value["revision"],
        ).values_list(*_VERSION_FIELDS)
        written = trace.version_rows(rows, 0)
        if not written:
            raise NotFound(
                f"No version {value['revision']} of '{value['document']}' in '{value['resource']}'."
            )
        return written
    if kind == "apiKey":
        reaching = ApiKey.objects.filter(prefix=value).filter(
            Q(project=trace.project) | Q(project__isnull=True)
        )
        if not reaching.exists():
            raise NotFound(f"No API key '{value}' reaches project {trace.project.id}.")
        rows = versions.filter(origin__actor=f"key:{value}").order_by("id")
        return trace.version_rows(rows.values_list(*_VERSION_FIELDS), 0)
    # Exact text, in a version's title, summary or text (what recalls show models and an
    # erasure erases): LIKE narrows (on SQLite it ignores ASCII case), Python decides.
    held = Q(title__contains=value) | Q(summary__contains=value) | Q(text__contains=value)
    rows = versions.filter(held).order_by("id")
    exact = (
        r[:-3]
        for r in rows.values_list(*_VERSION_FIELDS, "title", "summary", "text")
        if any(value in part for part in r[-3:])
    )
    return trace.version_rows(exact, 0)


def trace_graph(
    *, project: Project, environment: str, source: dict[str, Any], hops: int
) -> dict[str, Any]:
    """The taint graph of `source` (checked by check_source) up to `hops` hops."""
    check_environment(environment)
    resources = Resource.objects.filter(project=project, environment=environment)
    trace = Trace(project=project, environment=environment, resources={r.pk: r for r in resources})
    frontier = _sources(trace, source)
    for hop in range(1, hops + 1):
        if not frontier:
            break
        changed = trace.taint(trace.readers(frontier, hop), hop)
        frontier = trace.session_writes(changed, hop)
    return trace.graph()
