"""Contain an incident in one action: freeze, end sessions, revert, revoke the key.

Each action goes through the rule that owns it (freeze, session end, the
conditional revert of session revert, the records' provider delete, key
revoke), so each is audited where it happens; the containment itself is
audited as `incident.contain` (the `incident.contained` webhook). A dry run
computes the same report and writes nothing; containing again changes
nothing more (what is frozen, ended, restored, deleted or revoked stays so and
is reported `unchanged`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from memoryadmin.agents.models import (
    EventType,
    OperationAction,
    OperationKind,
    OperationState,
    ProviderOperation,
    Session,
    SessionEvent,
    SessionStatus,
)
from memoryadmin.agents.services.operations import UNSETTLED, operation_dead_letter
from memoryadmin.agents.services.records import record_delete
from memoryadmin.agents.services.reverts import (
    CONFLICT,
    REDACTED,
    RESTORE,
    RevertItem,
    document_versions,
    plan_document,
    revert_apply,
)
from memoryadmin.agents.services.sessions import sessions_end
from memoryadmin.core.errors import Conflict, DomainError, InvalidRequest, NotFound
from memoryadmin.incidents.models import Incident, NamedOperation
from memoryadmin.memory.models import ApiKey, Document, DocumentVersion, Proposal, Resource
from memoryadmin.memory.providers import manages_records
from memoryadmin.memory.services.audit import audit_record
from memoryadmin.memory.services.documents import documents_set_agent_writes
from memoryadmin.memory.services.keys import api_key_revoke
from memoryadmin.memory.services.proposals import proposal_reject
from memoryadmin.runner.jobs import durable, enqueue

FREEZE = "freeze"
END_SESSIONS = "endSessions"
REVERT = "revert"
REVOKE_KEY = "revokeKey"
ACTIONS = (FREEZE, END_SESSIONS, REVERT, REVOKE_KEY)

# Outcomes, as the report says them (a dry run says what would happen).
FROZEN = "frozen"
ENDED = "ended"
RESTORED = "restored"
MERGE = "conflict"
REJECTED = "rejected"
DELETED = "deleted"
QUEUED = "queued"
# A tainted write its provider has not finished: nothing to undo yet.
PENDING = "pending"
DEAD_LETTER = "dead_letter"
NOT_UNDOABLE = "not_undoable"
REVOKED = "revoked"
# A key of every project: made and ended with `manage.py apikey` only, never by one
# project's containment.
NOT_REVOCABLE = "not_revocable_here"
UNCHANGED = "unchanged"
GONE = "document_deleted"
# Outcomes that write nothing (the rest count in a report's `changed`): a conflict is
# left for a person, a deleted document or an http write has nothing to undo.
_CHANGES_NOTHING = {UNCHANGED, NOT_REVOCABLE, MERGE, GONE, NOT_UNDOABLE, PENDING}


def applicable(incident: Incident) -> list[str]:
    """The actions that apply to an incident's graph (the default of a containment)."""
    kinds = {node["kind"] for node in incident.graph.get("nodes", [])}
    found = []
    if "version" in kinds:
        found.append(FREEZE)
    if "session" in kinds:
        found.append(END_SESSIONS)
    if kinds & {"version", "record"}:
        found.append(REVERT)
    if "apiKey" in incident.source:
        found.append(REVOKE_KEY)
    return found


def check_actions(value: object, incident: Incident) -> list[str]:
    if value is None:
        return applicable(incident)
    if (
        not isinstance(value, list)
        or not value
        or any(item not in ACTIONS for item in value)
        or len(set(value)) != len(value)
    ):
        raise InvalidRequest(
            f"actions is a list of distinct actions among {', '.join(ACTIONS)}.",
            details={"field": "actions"},
        )
    if REVOKE_KEY in value and "apiKey" not in incident.source:
        raise InvalidRequest(
            "revokeKey applies only to an incident traced from an API key.",
            details={"field": "actions"},
        )
    return [action for action in ACTIONS if action in value]


def check_dry_run(value: object) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidRequest("dryRun must be true or false.", details={"field": "dryRun"})
    return value


@dataclass
class _Report:
    incident: Incident
    dry_run: bool
    actions: list[str]
    # node id -> {action: outcome}
    outcomes: dict[str, dict[str, str]] = field(default_factory=lambda: defaultdict(dict))
    documents: list[dict[str, Any]] = field(default_factory=list)
    # Operations of the store the records' undo left: the deletes that failed (dead
    # letters) and those the provider only accepted (open until it finishes them).
    dead_letters: list[str] = field(default_factory=list)
    queued: list[str] = field(default_factory=list)
    # Tainted writes the provider had not finished (their operations): completed once
    # they settle (`incident_contain_settled`).
    pending: list[str] = field(default_factory=list)

    def mark(self, node: str, action: str, outcome: str) -> None:
        self.outcomes[node][action] = outcome

    def as_dict(self) -> dict[str, Any]:
        nodes = [
            {"id": node["id"], "kind": node["kind"], "outcomes": self.outcomes.get(node["id"], {})}
            for node in self.incident.graph.get("nodes", [])
        ]
        if "apiKey" in self.incident.source:
            key = f"apiKey:{self.incident.source['apiKey']}"
            nodes.append({"id": key, "kind": "apiKey", "outcomes": self.outcomes.get(key, {})})
        return {
            "incident": self.incident.id,
            "dryRun": self.dry_run,
            "actions": self.actions,
            "nodes": nodes,
            "documents": self.documents,
            "deadLetters": self.dead_letters,
            "queued": self.queued,
            "pending": self.pending,
            "changed": _changed(nodes),
        }


def _changed(nodes: list[dict[str, Any]]) -> int:
    """How many outcomes of a report's nodes wrote something."""
    return sum(
        1 for n in nodes for outcome in n["outcomes"].values() if outcome not in _CHANGES_NOTHING
    )


def _nodes(incident: Incident, kind: str) -> list[dict[str, Any]]:
    return [node for node in incident.graph.get("nodes", []) if node["kind"] == kind]


def _documents(incident: Incident) -> tuple[dict[tuple[str, str], Document], dict[int, Resource]]:
    """The live and deleted documents of the graph's versions, in two queries."""
    wanted = {(n["resource"], n["document"]) for n in _nodes(incident, "version")}
    resources = {
        r.pk: r
        for r in Resource.objects.filter(
            project_id=incident.project_id,
            environment=incident.environment,
            resource_id__in={r for r, _ in wanted},
        )
    }
    documents: dict[tuple[str, str], Document] = {}
    rows = Document.objects.filter(
        resource_id__in=list(resources), doc_id__in={d for _, d in wanted}
    )
    for document in rows:
        document.resource = resources[document.resource_id]
        key = (document.resource.resource_id, document.doc_id)
        if key in wanted:
            documents[key] = document
    return documents, resources


def _freeze(report: _Report, documents: dict[tuple[str, str], Document], actor: str) -> None:
    """Every affected live document frozen, a few statements per resource."""
    outcomes: dict[tuple[str, str], str] = {}
    wanted: dict[str, list[str]] = defaultdict(list)
    for key, document in sorted(documents.items()):
        if document.deleted:
            outcomes[key] = GONE
        elif not document.agent_writes:
            outcomes[key] = UNCHANGED
        else:
            outcomes[key] = FROZEN
            wanted[key[0]].append(key[1])
    if not report.dry_run:
        for resource_id, doc_ids in wanted.items():
            resource = documents[(resource_id, doc_ids[0])].resource
            changed = set(
                documents_set_agent_writes(
                    resource=resource, doc_ids=doc_ids, enabled=False, actor=actor
                )
            )
            for doc_id in doc_ids:
                outcomes[(resource_id, doc_id)] = FROZEN if doc_id in changed else UNCHANGED
            # The revert that follows writes over the revisions the freeze made.
            fresh = Document.objects.filter(resource=resource, doc_id__in=doc_ids)
            for document in fresh:
                document.resource = resource
                documents[(resource_id, document.doc_id)] = document
    for node in _nodes(report.incident, "version"):
        outcome = outcomes.get((node["resource"], node["document"]))
        if outcome is not None:
            report.mark(node["id"], FREEZE, outcome)


def _end_sessions(report: _Report, actor: str) -> None:
    nodes = {n["id"].removeprefix("session:"): n for n in _nodes(report.incident, "session")}
    active = set(Session.objects.filter(pk__in=list(nodes)).active().values_list("id", flat=True))
    if active and not report.dry_run:
        ended = sessions_end(session_ids=sorted(active), actor=actor)
        active &= {session.id for session in ended if session.status == SessionStatus.ENDED}
    for session_id, node in sorted(nodes.items()):
        report.mark(node["id"], END_SESSIONS, ENDED if session_id in active else UNCHANGED)


# A document whose version before the first tainted one was redacted has no text to return
# to: it stays as it is (frozen), a conflict without a merge; its entry in `documents`
# says why (action `redacted`, the redacted version as `restoreRevision`).
_REVERT_OUTCOMES = {
    RESTORE: RESTORED,
    CONFLICT: MERGE,
    REDACTED: MERGE,
    "unchanged": UNCHANGED,
    "deleted": GONE,
}


def _tainted(revisions: set[str]) -> Callable[[DocumentVersion], bool]:
    return lambda version: version.revision in revisions


def _revert_documents(
    report: _Report, documents: dict[tuple[str, str], Document], actor: str
) -> None:
    """The conditional undo of every tainted version (session revert's rule): restored where
    nobody else changed the content since, the merge reported where somebody did."""
    tainted: dict[tuple[str, str], set[str]] = defaultdict(set)
    for node in _nodes(report.incident, "version"):
        if node.get("revision"):
            tainted[(node["resource"], node["document"])].add(node["revision"])
    targets = {key: documents[key] for key in tainted if key in documents}
    versions = document_versions([d.pk for d in targets.values()])
    items: list[tuple[tuple[str, str], RevertItem]] = []
    for key, document in sorted(targets.items()):
        items.append((key, plan_document(document, versions[document.pk], _tainted(tainted[key]))))
    if not report.dry_run:
        revert_apply([item for _, item in items], actor=actor)
    for (resource_id, doc_id), item in items:
        report.documents.append(item.as_dict())
        outcome = _REVERT_OUTCOMES[item.action]
        for node in _nodes(report.incident, "version"):
            if (node["resource"], node["document"]) == (resource_id, doc_id) and node.get(
                "revision"
            ):
                report.mark(node["id"], REVERT, outcome)


def _reject_proposals(report: _Report, actor: str) -> None:
    nodes = [n for n in _nodes(report.incident, "version") if n.get("proposal")]
    if not nodes:
        return
    pending = set(
        Proposal.objects.filter(
            pk__in=[n["proposal"] for n in nodes], state="pending", expires_at__gt=timezone.now()
        ).values_list("id", flat=True)
    )
    for node in nodes:
        outcome = REJECTED if node["proposal"] in pending else UNCHANGED
        if outcome == REJECTED and not report.dry_run:
            try:
                proposal_reject(
                    project=report.incident.project,
                    environment=report.incident.environment,
                    proposal_id=node["proposal"],
                    reason=f"Tainted by incident {report.incident.id}.",
                    actor=actor,
                )
            except (Conflict, NotFound):
                outcome = UNCHANGED
        report.mark(node["id"], REVERT, outcome)


def _undo_records(report: _Report, actor: str, *, operation: str | None = None) -> None:
    """Tainted records deleted through their provider; a refusal or a failure becomes a
    dead letter of the operation store, a delete the provider only accepted is the open
    operation it is (both named by the report). An http provider's write has no undo
    here. A write the provider had not finished when the incident was traced (a node
    named by its operation) is undone as the records its operation stored, once it has
    succeeded; until then it is `pending`, named by the report, completed when it settles
    (one that failed stored nothing). `operation`: only the nodes of that write."""
    nodes = [
        node
        for node in _nodes(report.incident, "record")
        if operation is None or node.get("operation") == operation
    ]
    resources = {
        r.resource_id: r
        for r in Resource.objects.filter(
            project_id=report.incident.project_id,
            environment=report.incident.environment,
            resource_id__in={n["resource"] for n in nodes},
        )
    }
    for node in nodes:
        resource = resources.get(node["resource"])
        record_ids = [node["recordId"]] if node.get("recordId") is not None else []
        if resource is not None and node.get("operation"):
            stored = _stored_by(node)
            if isinstance(stored, str):
                if stored == PENDING:
                    report.pending.append(node["operation"])
                report.mark(node["id"], REVERT, stored)
                continue
            record_ids = stored
        if resource is None or not record_ids or not manages_records(resource):
            report.mark(node["id"], REVERT, NOT_UNDOABLE if resource is not None else UNCHANGED)
            continue
        outcomes = [
            _undo_record(report, resource, node["namespace"], record_id, actor)
            for record_id in record_ids
        ]
        report.mark(node["id"], REVERT, min(outcomes, key=_UNDO_ORDER.index))


# A node of several records is reported by the outcome of its record that most needs a look.
_UNDO_ORDER = (DEAD_LETTER, QUEUED, DELETED, UNCHANGED)


def _stored_by(node: dict[str, Any]) -> list[str] | str:
    """The records a pending write's operation stored, once it succeeded (its session's
    `record.saved` names them), or the outcome to report instead: `pending` while its
    outcome is not known (open, or a dead letter for an owner to settle), `unchanged` for
    one that failed or was discarded (it stored nothing), `not_undoable` for a success
    that named no record."""
    state = (
        ProviderOperation.objects.filter(pk=node["operation"])
        .values_list("state", flat=True)
        .first()
    )
    if state in UNSETTLED:
        return PENDING
    saved = SessionEvent.objects.filter(
        session_id=node.get("session"),
        type=EventType.RECORD_SAVED,
        data__operation=node["operation"],
    ).values_list("data", flat=True)
    stored = [i for data in saved for i in data.get("recordIds") or [] if isinstance(i, str)]
    if stored:
        return stored
    # Settled without an event (failed, discarded) stored nothing; one gone since
    # (settled long ago) left its event if it stored anything.
    return NOT_UNDOABLE if saved or state == OperationState.SUCCEEDED else UNCHANGED


def _undo_record(
    report: _Report, resource: Resource, namespace: str, record_id: str, actor: str
) -> str:
    if report.dry_run:
        return DELETED
    try:
        result = record_delete(
            resource=resource, namespace=namespace, record_id=record_id, actor=actor
        )
    except NotFound:
        return UNCHANGED
    except DomainError as exc:
        operation = operation_dead_letter(
            resource=resource,
            namespace=namespace,
            principal=actor,
            kind=OperationKind.CONTAINMENT_UNDO,
            action=OperationAction.DELETE,
            record_id=record_id,
            error=f"incident {report.incident.id}: {exc.message}",
        )
        report.dead_letters.append(operation.id)
        return DEAD_LETTER
    if result.get("status") == "queued":
        report.queued.append(result["operation"])
        return QUEUED
    return DELETED


def _revoke_key(report: _Report, actor: str) -> None:
    """The source key revoked if it is a key of the incident's project; a key of every
    project that reaches it is reported `not_revocable_here` and left alone."""
    prefix = report.incident.source["apiKey"]
    keys = ApiKey.objects.filter(prefix=prefix).filter(
        Q(project_id=report.incident.project_id) | Q(project__isnull=True)
    )
    now = timezone.now()
    outcome = UNCHANGED
    for key in keys:
        if not key.works_at(now):
            continue
        if key.project_id is None:
            outcome = REVOKED if outcome == REVOKED else NOT_REVOCABLE
            continue
        outcome = REVOKED
        if not report.dry_run:
            api_key_revoke(key=key, actor=actor)
    report.mark(f"apiKey:{prefix}", REVOKE_KEY, outcome)


def incident_contain(
    *, incident: Incident, dry_run: object, actions: object, actor: str
) -> dict[str, Any]:
    """Runs the chosen actions (default: all that apply) over the incident's graph and
    reports what happened to every node."""
    report = _Report(
        incident=incident,
        dry_run=check_dry_run(dry_run),
        actions=check_actions(actions, incident),
    )
    documents, _ = _documents(incident)
    # Each action over the whole graph is one transaction (one commit, not one per node;
    # all of it or none). Freeze first: from then on no agent writes the documents.
    if FREEZE in report.actions:
        with transaction.atomic():
            _freeze(report, documents, actor)
    if END_SESSIONS in report.actions:
        with transaction.atomic():
            _end_sessions(report, actor)
    if REVERT in report.actions:
        with transaction.atomic():
            _revert_documents(report, documents, actor)
            _reject_proposals(report, actor)
        # Through the provider, one record at a time, outside any transaction.
        _undo_records(report, actor)
    if REVOKE_KEY in report.actions:
        _revoke_key(report, actor)
    answer = report.as_dict()
    if report.dry_run:
        return answer
    with transaction.atomic():
        if not answer["changed"] and incident.containment:
            # Contained again without effect: the incident keeps the report of the last
            # containment that wrote something (or its first, its conflicts, queued and
            # pending operations to settle), no entry, no `incident.contained`.
            return answer
        # The incident keeps the last containment that wrote something (or its first):
        # a later one that changed nothing does not hide what was done.
        _keep(
            incident,
            answer,
            actor=actor,
            audit={
                "actions": report.actions,
                "changed": answer["changed"],
                "deadLetters": report.dead_letters,
                "queued": report.queued,
                "pending": report.pending,
            },
        )
    return answer


def _keep(
    incident: Incident, report: dict[str, Any], *, actor: str, audit: dict[str, Any] | None
) -> None:
    """The incident keeps `report` (in the caller's transaction), and the operations it
    names stay as long as it names them (the operations' retention); every write it names
    `pending` is completed once it settles, whichever of the two commits last. With
    `audit` (what the containment wrote), it is the containment's time and audited
    `incident.contain` (the `incident.contained` webhook)."""
    changes: dict[str, Any] = {"containment": report}
    if audit is not None:
        changes["contained_at"] = timezone.now()
    # The update takes the incident's row lock (held to the commit): a completion's
    # update of the kept report is before it or after it, never in between.
    Incident.objects.filter(pk=incident.pk).update(**changes)
    incident.containment = report
    incident.contained_at = changes.get("contained_at", incident.contained_at)
    named = {*report["deadLetters"], *report["queued"], *report["pending"]}
    # Named by the report kept until now: a completion of each is enqueued already (by its
    # settlement's hook, or by the write of that report), or has run and left it named no
    # more. Stable under the row lock: reports are kept under it only.
    named_before = set(
        NamedOperation.objects.filter(incident=incident).values_list("operation_id", flat=True)
    )
    NamedOperation.objects.filter(incident=incident).delete()
    NamedOperation.objects.bulk_create(
        NamedOperation(incident=incident, operation_id=operation_id)
        for operation_id in sorted(named)
    )
    # A write the report names `pending` that settled since it was read (outside this
    # transaction) had its settle hook run before this report named it: its completion
    # is enqueued here, unless the report kept until now named it (then one is enqueued
    # already and completes this report: a second would race it). Their rows are read
    # locked: one settling meanwhile waits for this commit, and its hook then finds this
    # report naming it.
    settled = (
        ProviderOperation.objects.select_for_update(no_key=True)
        .filter(pk__in=[o for o in report["pending"] if o not in named_before])
        .order_by("id")
        .values_list("id", "state")
    )
    for operation_id, state in settled:
        if state not in UNSETTLED:
            _complete_later(incident.pk, operation_id, incident.project_id)
    if audit is not None:
        audit_record(
            project_id=incident.project_id,
            environment=incident.environment,
            actor=actor,
            action="incident.contain",
            detail={"incident": incident.id, **audit},
        )


# Who completes a containment when a write it left pending settles.
SETTLED_ACTOR = "system:incidents"


def pending_settled(operation: ProviderOperation) -> None:
    """Registered with the operation store (`operations_settled_register`): an operation
    a contained incident's kept report names, settled, has that incident's containment of
    it completed by a job (`incident_contain_settled`), enqueued in the transaction that
    settles it, so it runs once the write's `record.saved` is committed and is not lost.
    The job itself finds whether the report names it as `pending` (it may name it as a
    queued delete or a dead letter, or no more)."""
    named = NamedOperation.objects.filter(operation_id=operation.id).values_list(
        "incident_id", flat=True
    )
    for incident_id in named:
        _complete_later(incident_id, operation.id, operation.project_id)


def _complete_later(incident_id: str, operation_id: str, project: str) -> None:
    """`incident_contain_settled` enqueued in the current transaction: it runs after it
    commits, so its check of the kept report (under the row lock) sees what this one
    wrote. No key: a key would hand back a job already running, past its check."""
    enqueue(
        incident_contain_settled,
        project=project,
        incident_id=incident_id,
        operation_id=operation_id,
    )


@durable(atomic=False)
def incident_contain_settled(*, incident_id: str, operation_id: str) -> None:
    """Completes an incident's containment of a write it reported `pending`, once that
    write's operation has settled: the records it stored are undone as containment undoes
    any (`_undo_records`, through the provider, the record's claim and its open delete:
    run twice, or beside an owner containing again, the record is deleted once), and the
    kept report says so of its node: its outcome, its queued delete or dead letter, no
    more `pending`. Audited `incident.contain` (the `incident.contained` webhook) when it
    wrote something; one that stored nothing (failed) is `unchanged`, the report updated,
    no entry. Nothing for an incident whose kept report no longer names the write as
    pending (contained again since), nor while the write is unsettled (retried)."""
    incident = Incident.objects.filter(pk=incident_id).first()
    if incident is None or operation_id not in incident.containment.get("pending", []):
        return
    report = _Report(incident=incident, dry_run=False, actions=[REVERT])
    _undo_records(report, SETTLED_ACTOR, operation=operation_id)
    if operation_id in report.pending or not report.outcomes:
        return
    done = {node: outcomes[REVERT] for node, outcomes in report.outcomes.items()}
    with transaction.atomic():
        kept = Incident.objects.select_for_update().filter(pk=incident_id).first()
        if kept is None or operation_id not in kept.containment.get("pending", []):
            return
        containment = kept.containment
        for node in containment["nodes"]:
            if node["id"] in done:
                node["outcomes"][REVERT] = done[node["id"]]
        containment["pending"] = [o for o in containment["pending"] if o != operation_id]
        for name, added in (("deadLetters", report.dead_letters), ("queued", report.queued)):
            containment[name] += [o for o in added if o not in containment[name]]
        containment["changed"] = _changed(containment["nodes"])
        wrote = sum(1 for outcome in done.values() if outcome not in _CHANGES_NOTHING)
        _keep(
            kept,
            containment,
            actor=SETTLED_ACTOR,
            audit={
                "actions": [REVERT],
                "changed": wrote,
                "deadLetters": report.dead_letters,
                "queued": report.queued,
                "pending": containment["pending"],
                "operation": operation_id,
            }
            if wrote
            else None,
        )
