"""Erasures: every stored copy of a text (or of named documents) removed, with a signed receipt.

One rule book for every door (API, Memory page, CLI). Each app erases its own
tables (memory: documents, versions, proposals, audit details, search index; the
apps that keep copies of memory text register theirs from their `ready()` with
core.erasing's `copies_register`, as every redaction finds them: agents' recalls
and session events, webhooks' payloads, incidents, the Memory page's uploads
waiting for their import), and records that live with an external provider are
deleted through their provider; a delete that fails becomes a dead letter of the
operation store and the receipt says so.

A dry run counts what an erasure would remove and changes nothing. An erasure
counts the same way first and is refused (413) past the limit of copies one
erasure may change (`MEMORYADMIN_ERASURE_MAX_COPIES`), then deletes the
provider records, then changes every table in one transaction that counts
again (refused the same way past the limit, nothing changed: copies written
since the first count are bounded too), stores its signed receipt and audits
it (the audit entry names the erasure, never the text). Where that transaction
fails after provider records were deleted, those records have an erasure of
their own, its receipt not complete (`_stopped`). Running it again finds
nothing more: a second receipt says 0.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from memoryadmin.agents.models import Binding, OperationAction, OperationKind, Scope
from memoryadmin.agents.services import records as record_services
from memoryadmin.agents.services.operations import operation_dead_letter
from memoryadmin.core.cursors import keyset_page
from memoryadmin.core.environments import check_environment
from memoryadmin.core.erasing import copies_registered
from memoryadmin.core.errors import DomainError, InvalidRequest, NotFound, PreconditionFailed
from memoryadmin.core.rows import database_vendor
from memoryadmin.core.strings import strings_check
from memoryadmin.erasures.models import Erasure, NamedOperation
from memoryadmin.erasures.receipts import FORMAT, FORMAT_VERSION, public_key, sign
from memoryadmin.external.ids import namespaces_seen
from memoryadmin.memory.limits import check_document_id
from memoryadmin.memory.models import Document, Project, Resource
from memoryadmin.memory.providers import manages_records
from memoryadmin.memory.representations import iso_ms
from memoryadmin.memory.services.audit import audit_record
from memoryadmin.memory.services.deployments import resource_documents_check, resource_get
from memoryadmin.memory.services.erasure import (
    audit_erase,
    memory_erase_documents,
    memory_erase_text,
)
from memoryadmin.memory.services.projects import erasure_epoch_advance, project_lock
from memoryadmin.memory.services.redaction import check_reason

logger = logging.getLogger(__name__)

TEXT_MIN_CHARS = 8
TEXT_MAX_CHARS = 100_000
DOCUMENTS_MAX = 100
# Of each resource whose records live with its provider: the namespaces looked at,
# and the pages of records read in each.
NAMESPACES_MAX = 100
RECORD_PAGES_MAX = 20
ERASURE_PAGE_SIZE = 50
# Every place a receipt counts, in the order receipts and pages list them.
PLACES = {
    "documents": "documents (current text)",
    "versions": "versions (redacted)",
    "searchIndex": "search index entries",
    "proposals": "proposals",
    "recalls": "recalls (what models were shown)",
    "sessionEvents": "session events",
    "audit": "audit details",
    "incidents": "incidents (titles, sources, graphs, containment reports)",
    "webhookPayloads": "webhook payloads not delivered yet",
    "webhookPayloadsDelivered": "webhook payloads delivered",
    "exports": "exports kept on the server (uploads waiting for their import)",
    "externalRecords": "external provider records",
}

# The places the memory app's erasure counts, and the provider records; every other
# place of PLACES is counted by the app that registered its copies (core.erasing).
_OWN_PLACES = {"documents", "versions", "searchIndex", "proposals", "audit", "externalRecords"}


class ErasureTooLarge(DomainError):
    status = 413
    code = "erasure_too_large"


@dataclass(frozen=True)
class Match:
    kind: str  # "text" or "documents"
    needles: tuple[str, ...] = ()
    documents: tuple[Document, ...] = ()

    def described(self) -> dict[str, Any]:
        """The match as a receipt names it: a salted hash of a text, never the text."""
        if self.kind == "documents":
            named = [{"resource": d.resource.resource_id, "id": d.doc_id} for d in self.documents]
            return {"kind": "documents", "documents": named}
        salt = secrets.token_bytes(16)
        digest = hashlib.sha256(salt + self.needles[0].encode()).hexdigest()
        return {"kind": "text", "salt": salt.hex(), "sha256": digest}


@dataclass
class ExternalHit:
    resource: Resource
    namespace: str
    record_id: str


@dataclass
class ExternalPlan:
    hits: list[ExternalHit] = field(default_factory=list)
    # Namespaces whose records could not be read: (resource, namespace, error).
    unreadable: list[tuple[Resource, str, str]] = field(default_factory=list)


def _no_external() -> dict[str, list[dict[str, Any]]]:
    return {"deleted": [], "queued": [], "failed": []}


@dataclass(frozen=True)
class _Run:
    """The erasure being run: where, what and why, by whom, and what became of its
    provider records (`external`: none deleted yet until they are)."""

    project: Project
    environment: str
    match: Match
    reason: str
    actor: str
    external: dict[str, list[dict[str, Any]]] = field(default_factory=_no_external)


def check_match(*, project: Project, environment: str, value: object) -> Match:
    """The match of a request: `{"text": ...}` or `{"documents": [{"resource", "id"}]}`."""
    if not isinstance(value, dict) or len(value) != 1 or not {"text", "documents"} & set(value):
        raise InvalidRequest(
            'match is {"text": "<exact text>"} or {"documents": [{"resource", "id"}, ...]}.'
        )
    strings_check(value, field="match")
    if "text" in value:
        text = value["text"]
        if not isinstance(text, str) or not TEXT_MIN_CHARS <= len(text) <= TEXT_MAX_CHARS:
            raise InvalidRequest(
                f"match.text is the exact text to erase: {TEXT_MIN_CHARS}-{TEXT_MAX_CHARS} "
                "characters (a shorter one would be someone else's words too)."
            )
        return Match(kind="text", needles=(text,))
    named = value["documents"]
    if not isinstance(named, list) or not 1 <= len(named) <= DOCUMENTS_MAX:
        raise InvalidRequest(f"match.documents is a list of 1-{DOCUMENTS_MAX} documents.")
    documents: dict[int, Document] = {}
    for index, item in enumerate(named):
        if (
            not isinstance(item, dict)
            or set(item) != {"resource", "id"}
            or not all(isinstance(part, str) for part in item.values())
        ):
            raise InvalidRequest(f'match.documents[{index}] is {{"resource": ..., "id": ...}}.')
        resource = resource_documents_check(
            resource_get(project=project, environment=environment, resource_id=item["resource"])
        )
        check_document_id(item["id"])
        document = (
            Document.objects.select_related("resource")
            .filter(resource=resource, doc_id=item["id"])
            .first()
        )
        if document is None:
            raise NotFound(f"Resource '{resource.resource_id}' has no document '{item['id']}'.")
        documents[document.pk] = document
    return Match(kind="documents", documents=tuple(documents.values()))


def named_documents(items: Sequence[str]) -> list[dict[str, str]]:
    """`RESOURCE/ID` strings (the CLI's options, the page's lines) as a match's documents."""
    documents = []
    for item in items:
        resource, slash, doc_id = item.strip().partition("/")
        if not slash or not resource or not doc_id:
            raise InvalidRequest(f"A document is named RESOURCE/ID, not {item.strip()!r}.")
        documents.append({"resource": resource, "id": doc_id})
    return documents


def check_erasure_reason(reason: object, match: Match) -> str:
    reason = check_reason(reason, what="erasure")
    if any(needle in reason for needle in match.needles):
        raise InvalidRequest("The reason must not contain the text it erases: receipts keep it.")
    return reason


# Provider records.


def _record_resources(project: Project, environment: str) -> list[Resource]:
    resources = Resource.objects.filter(project=project, environment=environment)
    return [resource for resource in resources if manages_records(resource)]


def _namespaces(resource: Resource) -> tuple[list[str], str | None]:
    """The first NAMESPACES_MAX namespaces (by name) the server has seen records of or bound
    sessions to, and the first one past them (None when none is)."""
    wanted = NAMESPACES_MAX + 1
    bound = (
        Binding.objects.filter(resource=resource, scope=Scope.NAMESPACE)
        .exclude(target_id="")
        .values_list("target_id", flat=True)
        .distinct()
        .order_by("target_id")[:wanted]
    )
    names = sorted(set(namespaces_seen(resource=resource, limit=wanted)) | set(bound))
    return names[:NAMESPACES_MAX], (names[NAMESPACES_MAX] if len(names) > NAMESPACES_MAX else None)


def _external_plan(run: _Run, needles: Sequence[str]) -> ExternalPlan:
    """The provider records holding a needle, read through their providers."""
    plan = ExternalPlan()
    if not needles:
        return plan
    for resource in _record_resources(run.project, run.environment):
        namespaces, past = _namespaces(resource)
        for namespace in namespaces:
            cursor: str | None = None
            try:
                for _ in range(RECORD_PAGES_MAX):
                    records, cursor = record_services.record_list(
                        resource=resource, namespace=namespace, cursor=cursor
                    )
                    for record in records:
                        text = str(record.get("text", ""))
                        if any(needle in text for needle in needles):
                            hit = ExternalHit(resource, namespace, str(record["id"]))
                            plan.hits.append(hit)
                    if cursor is None:
                        break
                else:
                    plan.unreadable.append(
                        (resource, namespace, f"more than {RECORD_PAGES_MAX} pages of records")
                    )
            except DomainError as exc:
                plan.unreadable.append((resource, namespace, exc.message))
        if past is not None:
            # Not read, so not known to be free of the text: the receipt is not complete.
            error = (
                f"more than {NAMESPACES_MAX} namespaces: this one and every one after it "
                "(by name) were not read"
            )
            plan.unreadable.append((resource, past, error))
    return plan


def _external_erase(plan: ExternalPlan, actor: str) -> dict[str, list[dict[str, Any]]]:
    """Deletes the planned records through their providers; every failure (a delete,
    or a namespace that could not be read) is a dead letter of the operation store."""
    outcome = _no_external()
    for hit in plan.hits:
        where = {
            "resource": hit.resource.resource_id,
            "namespace": hit.namespace,
            "record": hit.record_id,
        }
        try:
            result = record_services.record_delete(
                resource=hit.resource, namespace=hit.namespace, record_id=hit.record_id, actor=actor
            )
        except DomainError as exc:
            dead = operation_dead_letter(
                resource=hit.resource,
                namespace=hit.namespace,
                principal=actor,
                kind=OperationKind.ERASURE_DELETE,
                action=OperationAction.DELETE,
                record_id=hit.record_id,
                error=f"erasure: {exc.message}",
            )
            outcome["failed"].append({**where, "operation": dead.id, "error": exc.message})
            continue
        if result.get("status") == "queued":
            outcome["queued"].append({**where, "operation": result["operation"]})
        else:
            outcome["deleted"].append(where)
    for resource, namespace, error in plan.unreadable:
        dead = operation_dead_letter(
            resource=resource,
            namespace=namespace,
            principal=actor,
            kind=OperationKind.ERASURE_DELETE,
            action=OperationAction.DELETE,
            record_id="",
            error=f"erasure: the records could not be read: {error}",
        )
        outcome["failed"].append(
            {"resource": resource.resource_id, "namespace": namespace, "record": None}
            | {"operation": dead.id, "error": error}
        )
    return outcome


# The database.


def _database(run: _Run, *, apply: bool) -> tuple[dict[str, int], Sequence[str]]:
    """Counts by place of this database's copies (and of the provider records the run
    deleted or queued), changed with `apply`, and the texts looked for (a named
    document's are its texts). Counted before anything changes: a redacted version takes
    its recalls' and audit entries' copies along. With `apply` the bound holds on these
    counts, taken in the transaction that changes them: copies written since an earlier
    count are bounded too."""
    counts, needles = _places(run, apply=False)
    counts["externalRecords"] = _external_count(run.external)
    if apply:
        _check_bound(sum(counts.values()))
        _places(run, apply=True)
    return counts, needles


def _places(run: _Run, *, apply: bool) -> tuple[dict[str, int], Sequence[str]]:
    counts: dict[str, int] = {}
    match = run.match
    needles: Sequence[str] = match.needles
    if match.kind == "documents":
        erased = memory_erase_documents(
            documents=match.documents, reason=run.reason, actor=run.actor, apply=apply
        )
        counts.update(erased.counts)
        needles = erased.needles
    else:
        counts.update(
            memory_erase_text(
                project_id=run.project.id,
                environment=run.environment,
                needles=needles,
                reason=run.reason,
                actor=run.actor,
                apply=apply,
            )
        )
    scope: dict[str, Any] = {"project_id": run.project.id, "environment": run.environment}
    scope |= {"needles": needles, "apply": apply}
    counts["audit"] = audit_erase(**scope)
    # Exports are streamed to their client (page, API, CLI); what the server keeps of
    # them (an uploaded export waiting for its import) is registered with the rest.
    for copies in copies_registered():
        for name, count in copies.erase(**scope).items():
            if name not in PLACES or name in _OWN_PLACES:
                raise ValueError(f"{name} is not a place receipts name for an app's copies")
            counts[name] = counts.get(name, 0) + count
    unsearched = set(PLACES) - _OWN_PLACES - set(counts)
    if unsearched:
        # A receipt never says complete about a place nobody searched.
        raise RuntimeError(f"No app registered the erasure's places {sorted(unsearched)}")
    return counts, needles


def _locked(project: Project) -> None:
    """One erasure of a project at a time (SQLite's writers are serialised anyway)."""
    project_lock(project_id=project.pk)


@dataclass(frozen=True)
class Outcome:
    dry_run: bool
    places: dict[str, int]
    copies: int
    erasure: Erasure | None = None

    def as_dict(self) -> dict[str, Any]:
        if self.erasure is not None:
            return erasure_dict(self.erasure)
        return {
            "dryRun": True,
            "places": self.places,
            "copies": self.copies,
            "maxCopies": settings.MEMORYADMIN_ERASURE_MAX_COPIES,
        }


def _check_bound(copies: int) -> None:
    limit = settings.MEMORYADMIN_ERASURE_MAX_COPIES
    if copies > limit:
        raise ErasureTooLarge(
            f"This erasure would change {copies} copies; one erasure changes at most {limit} "
            "(MEMORYADMIN_ERASURE_MAX_COPIES). Erase fewer documents, or a longer text, "
            "at a time.",
            details={"copies": copies, "maxCopies": limit},
        )


def _ordered(counts: dict[str, int]) -> dict[str, int]:
    return {name: counts.get(name, 0) for name in PLACES}


def erasure_run(
    *,
    project: Project,
    environment: str,
    match: object,
    reason: object,
    dry_run: bool,
    actor: str,
) -> Outcome:
    """A dry run's counts, or the erasure with its signed receipt (stored, audited)."""
    environment = check_environment(environment)
    checked = check_match(project=project, environment=environment, value=match)
    reason = check_erasure_reason(reason, checked)
    if not dry_run:
        public_key()  # refuses at once (503) where no signing key is configured
    run = _Run(project=project, environment=environment, match=checked, reason=reason, actor=actor)
    with transaction.atomic():
        _locked(project)
        counts, needles = _database(run, apply=False)
    plan = _external_plan(run, needles)
    counts["externalRecords"] = len(plan.hits)
    # Checked here before any provider record is deleted, and again on the counts of the
    # transaction that changes the database (_commit).
    copies = sum(counts.values())
    _check_bound(copies)
    if dry_run:
        return Outcome(dry_run=True, places=_ordered(counts), copies=copies)
    run = replace(run, external=_external_erase(plan, actor))
    try:
        erasure = _committed(run)
    except Exception as exc:
        # Provider records are gone whatever the database does: a receipt says which.
        stopped = _stopped(run, exc)
        if stopped is not None and isinstance(exc, DomainError):
            exc.details["erasure"] = stopped.id
        raise
    return Outcome(
        dry_run=False, places=erasure.signed["receipt"]["places"], copies=0, erasure=erasure
    )


def _committed(run: _Run) -> Erasure:
    for _ in range(2):
        try:
            return _commit(run)
        except PreconditionFailed:
            # A document changed between the count and its rewrite: count again.
            continue
    return _commit(run)


def _external_count(external: dict[str, list[dict[str, Any]]]) -> int:
    """The provider records a receipt counts: deleted, and deletes the provider accepted."""
    return len(external["deleted"]) + len(external["queued"])


@transaction.atomic
def _commit(run: _Run) -> Erasure:
    # One erasure at a time, and no recall that read a copy before this commit stores it.
    erasure_epoch_advance(project_id=run.project.pk)
    secure = _secure_delete(True)
    try:
        counts, _ = _database(run, apply=True)
    finally:
        _secure_delete(secure)
    return _store(run, counts)


def _stopped(run: _Run, error: Exception) -> Erasure | None:
    """Where the database's transaction failed (refused past the bound, a document changing
    under it three times, a database error) after provider records were deleted: the
    erasure of those records alone, stored with its signed receipt (every other place 0,
    not complete) and audited with the error's code, in a transaction of its own. None
    where no provider record was deleted (nothing changed), or where it could not be
    stored (logged: the records' own `record.delete` audit entries remain)."""
    if not _external_count(run.external):
        return None
    code = error.code if isinstance(error, DomainError) else type(error).__name__
    try:
        with transaction.atomic():
            counts = {"externalRecords": _external_count(run.external)}
            return _store(run, counts, stopped=code)
    except Exception:
        logger.exception(
            "The erasure of provider records deleted before its database part failed "
            "(%s) could not be stored.",
            code,
        )
        return None


def _store(run: _Run, counts: dict[str, int], *, stopped: str = "") -> Erasure:
    """The erasure and its signed receipt of `counts`, stored and audited; complete where
    no provider record failed and the database's part was not `stopped`."""
    now = timezone.now()
    erasure_id = "era_" + secrets.token_hex(12)
    complete = not run.external["failed"] and not stopped
    receipt = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "id": erasure_id,
        "project": run.project.id,
        "environment": run.environment,
        "match": run.match.described(),
        "reason": run.reason,
        "actor": run.actor,
        "erasedAt": iso_ms(now),
        "places": _ordered(counts),
        "copies": sum(counts.values()),
        "external": run.external,
        "complete": complete,
    }
    erasure = Erasure.objects.create(
        id=erasure_id,
        project=run.project,
        environment=run.environment,
        actor=run.actor,
        reason=run.reason,
        match_kind=run.match.kind,
        signed=sign(receipt),
        complete=complete,
        created_at=now,
    )
    # What the receipt names stays as long as it does (the operations' retention).
    named = {entry["operation"] for entry in run.external["queued"] + run.external["failed"]}
    NamedOperation.objects.bulk_create(
        NamedOperation(erasure=erasure, operation_id=operation_id) for operation_id in sorted(named)
    )
    audit_record(
        project_id=run.project.id,
        environment=run.environment,
        actor=run.actor,
        action="erasure.run",
        detail={
            "erasure": erasure_id,
            "match": run.match.kind,
            "copies": receipt["copies"],
            "complete": complete,
            "deadLetters": [failure["operation"] for failure in run.external["failed"]],
            "queued": [entry["operation"] for entry in run.external["queued"]],
        }
        | ({"stopped": stopped} if stopped else {}),
    )
    return erasure


def _secure_delete(on: bool) -> bool:
    """SQLite: freed pages are overwritten with zeros, so a rewritten row's old bytes do
    not stay in the file. Returns the setting it replaced (PostgreSQL: nothing to do)."""
    if database_vendor() != "sqlite":
        return False
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA secure_delete")
        previous = bool(cursor.fetchone()[0])
        cursor.execute(f"PRAGMA secure_delete = {'ON' if on else 'OFF'}")
    return previous


def erasure_list(
    *, project: Project, environment: str, cursor: str | None = None, limit: int = ERASURE_PAGE_SIZE
) -> tuple[list[Erasure], str | None]:
    environment = check_environment(environment)
    rows = Erasure.objects.filter(project=project, environment=environment)
    return keyset_page(
        rows,
        order=("-created_at", "id"),
        cursor=cursor,
        scope=f"erasures:{project.id}:{environment}",
        limit=limit,
    )


def erasure_get(*, project: Project, environment: str, erasure_id: str) -> Erasure:
    environment = check_environment(environment)
    erasure = Erasure.objects.filter(
        project=project, environment=environment, id=erasure_id
    ).first()
    if erasure is None:
        raise NotFound(f"No erasure '{erasure_id}' in {project.id} ({environment}).")
    return erasure


def erasure_dict(erasure: Erasure) -> dict[str, Any]:
    receipt = erasure.signed["receipt"]
    return {
        "id": erasure.id,
        "dryRun": False,
        "createdAt": iso_ms(erasure.created_at),
        "actor": erasure.actor,
        "reason": erasure.reason,
        "match": receipt["match"],
        "places": receipt["places"],
        "copies": receipt["copies"],
        "complete": erasure.complete,
        "receipt": erasure.signed,
    }
