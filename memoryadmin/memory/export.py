"""Exports: every live document of some resources, streamed, as one snapshot where possible.

The CLI writes the documents to files or one JSON Lines stream (`jsonl_chunks`),
and the Memory page to a zip download of the same files (`export_file`); all
open an export with `export_snapshot` and consume it while it is open.
An export written as files (`<dir>/manifest.json`, `<dir>/<resource>/<id>.json`)
or as the zip of those files loads into another project or environment with
`export_import`, which only ever creates documents; what it may read is bounded in
memoryadmin.memory.imports.

On PostgreSQL the whole export reads inside one REPEATABLE READ transaction,
so the count, the manifest and every document come from the same snapshot.
SQLite serialises writers with IMMEDIATE transactions, so holding one for a
long export would stop every other writer: there the reads are individual
chunks and the manifest says the export is not a consistent snapshot.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from memoryadmin.core.dbtimeout import statements_may_run
from memoryadmin.core.environments import check_environment
from memoryadmin.core.errors import (
    DomainError,
    InvalidRequest,
    NotFound,
    PreconditionFailed,
)
from memoryadmin.core.jsonbody import json_parse
from memoryadmin.core.rows import database_vendor
from memoryadmin.memory.imports import MANIFEST_NAME, ImportSource, MemberUnreadable
from memoryadmin.memory.limits import (
    agent_write_fields,
    agent_writes_shown,
    check_agent_writes,
    check_resource_id,
)
from memoryadmin.memory.models import Document, Project, Resource
from memoryadmin.memory.providers import keeps_documents, kinds_keeping_documents
from memoryadmin.memory.representations import DOCUMENT_FIELDS, document_of_values, iso_ms
from memoryadmin.memory.services.audit import audit_record
from memoryadmin.memory.services.deployments import resource_get
from memoryadmin.memory.services.documents import document_create, document_get

FORMAT = "memoryadmin.export"
FORMAT_VERSION = 1
__all__ = ["MANIFEST_NAME"]  # re-exported: exports write it, imports read it
# Documents read per query (or per fetch of a server-side cursor): memory
# stays bounded by one chunk of texts (at most 16 KiB each), whatever the
# number of documents.
CHUNK_SIZE = 200
STREAM_CHUNK_SIZE = 500
# Bytes of JSON Lines handed to the writer at once: few writes, memory bounded.
WRITE_SIZE = 1 << 18
_DOC_ID = DOCUMENT_FIELDS.index("doc_id")
_WRITES = DOCUMENT_FIELDS.index("agent_writes")
_REVIEW = DOCUMENT_FIELDS.index("agent_review")
# A frozen document's file also states the mode an unfreeze returns it to ("enabled" or
# "review"): the freeze keeps the document's review setting, and so does its import.
UNFROZEN = "agentWritesUnfrozen"


@dataclass
class ExportSnapshot:
    project: Project
    environment: str
    consistent: bool
    exported_at: datetime
    count: int = 0
    resource_rows: list[Resource] = field(default_factory=list)
    # Only these documents (of the one resource exported), when a selection is exported.
    doc_ids: list[str] | None = None
    open: bool = True

    @property
    def resources(self) -> list[str]:
        return [resource.resource_id for resource in self.resource_rows]

    def documents(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(resource id, document object) for every live document, resource by resource."""
        for resource in self.resource_rows:
            resource_id, max_bytes = resource.resource_id, resource.max_bytes
            review_default = resource.review_default
            for row in _documents_of(resource, self):
                document = document_of_values(
                    row, max_bytes=max_bytes, review_default=review_default
                )
                if not row[_WRITES]:
                    document[UNFROZEN] = agent_writes_shown(
                        agent_writes=True, agent_review=row[_REVIEW], default=review_default
                    )
                yield resource_id, document

    def manifest(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "formatVersion": FORMAT_VERSION,
            "project": self.project.id,
            "environment": self.environment,
            "exportedAt": iso_ms(self.exported_at),
            "resources": self.resources,
            "documents": self.count,
            "consistentSnapshot": self.consistent,
        }


def jsonl_chunks(snapshot: ExportSnapshot) -> Iterator[bytes]:
    """The export as JSON Lines, in pieces of about WRITE_SIZE bytes (whole lines)
    to write as they come: the manifest, then one line per document.

    A document line is the document object with its resource id added
    (`{"resource": ..., "id": ..., ...}`); every line ends with a newline.
    """
    lines = [orjson.dumps({**snapshot.manifest(), "layout": "jsonl"})]
    size = 0
    dumps = orjson.dumps
    for resource_id, document in snapshot.documents():
        line = dumps({"resource": resource_id, **document})
        lines.append(line)
        size += len(line)
        if size >= WRITE_SIZE:
            lines.append(b"")
            yield b"\n".join(lines)
            lines, size = [], 0
    if lines:
        lines.append(b"")
        yield b"\n".join(lines)


def export_file(data: dict[str, Any]) -> bytes:
    """A file of an export directory or zip, a document or the manifest: UTF-8 JSON
    indented by two spaces, with a final newline (the bytes of Python's
    `json.dumps(data, ensure_ascii=False, indent=2)`), from the CLI and the page alike."""
    return orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n"


def _documents_of(resource: Resource, snapshot: ExportSnapshot) -> Iterator[tuple[Any, ...]]:
    """Rows of DOCUMENT_FIELDS, as the database sends them (no model, no mapping)."""
    rows = Document.objects.live().filter(resource=resource).values_list(*DOCUMENT_FIELDS)
    if snapshot.doc_ids is not None:
        rows = rows.filter(doc_id__in=snapshot.doc_ids)
    if snapshot.consistent:
        # Inside the snapshot's transaction: one server-side cursor, fetched
        # in batches, so memory stays bounded by one batch.
        if not snapshot.open:
            raise RuntimeError("The export snapshot is closed; read documents inside its block.")
        yield from rows.order_by("doc_id").iterator(chunk_size=STREAM_CHUNK_SIZE)
        return
    # Keyset chunks on the unique (resource, id) key: no read stays open
    # across chunks, so SQLite writers are never held up by an export.
    after = ""
    while True:
        if not snapshot.open:
            raise RuntimeError("The export snapshot is closed; read documents inside its block.")
        chunk = list(rows.filter(doc_id__gt=after).order_by("doc_id")[:CHUNK_SIZE])
        yield from chunk
        if len(chunk) < CHUNK_SIZE:
            return
        after = chunk[-1][_DOC_ID]


def _export_resources(
    project: Project, environment: str, resource_ids: list[str] | None
) -> list[Resource]:
    if resource_ids is None:
        rows = Resource.objects.filter(
            project=project, environment=environment, kind__in=kinds_keeping_documents()
        )
        return list(rows.order_by("resource_id"))
    # Retired resources are exportable too: any resource of the environment.
    wanted = list(dict.fromkeys(resource_ids))
    return [
        resource_get(project=project, environment=environment, resource_id=resource_id)
        for resource_id in wanted
    ]


def _start_snapshot(*, nested: bool) -> bool:
    """Makes the current transaction a snapshot if it can; says whether it is one."""
    if database_vendor() != "postgresql":
        return False
    with connection.cursor() as cursor:
        if nested:
            # Nested in a caller's transaction, which may already have read:
            # its isolation level is what we get.
            cursor.execute("SHOW transaction_isolation")
            row = cursor.fetchone()
            return row is not None and row[0] in ("repeatable read", "serializable")
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        return True


@contextmanager
def export_snapshot(
    *,
    project: Project,
    environment: str,
    resource_ids: list[str] | None = None,
    doc_ids: list[str] | None = None,
    actor: str,
) -> Iterator[ExportSnapshot]:
    """Opens an export; read `documents()` inside the block.

    `doc_ids` exports only those documents of a single resource (a selection on
    the Memory page); ids that are not live documents are left out.

    Unknown resource ids raise NotFound before anything is read. One audit
    entry "memory.export" is recorded; it stays even when the consumer fails
    part way, since some documents may already have left.
    """
    check_environment(environment)
    if doc_ids is not None and (resource_ids is None or len(set(resource_ids)) != 1):
        raise InvalidRequest("A selection of documents is exported from one resource.")
    on_postgres = database_vendor() == "postgresql"
    nested = connection.in_atomic_block
    # Only PostgreSQL gets a transaction (see the module docstring).
    with transaction.atomic() if on_postgres else _no_transaction():
        snapshot = ExportSnapshot(
            project=project,
            environment=environment,
            consistent=_start_snapshot(nested=nested),
            exported_at=timezone.now(),
            doc_ids=None if doc_ids is None else list(dict.fromkeys(doc_ids)),
        )
        # Its reads scale with the project's data: bounded by the download's deadline,
        # not by a request's statement timeout (core/dbtimeout.py).
        statements_may_run(float(settings.MEMORYADMIN_EXPORT_SECONDS))
        snapshot.resource_rows = _export_resources(project, environment, resource_ids)
        counted = Document.objects.live().filter(resource__in=snapshot.resource_rows)
        if snapshot.doc_ids is not None:
            counted = counted.filter(doc_id__in=snapshot.doc_ids)
        snapshot.count = counted.count()
        audit_record(
            project_id=project.id,
            environment=environment,
            actor=actor,
            action="memory.export",
            detail={
                "resources": snapshot.resources,
                "documents": snapshot.count,
                "consistentSnapshot": snapshot.consistent,
                **({"selected": snapshot.doc_ids} if snapshot.doc_ids is not None else {}),
            },
        )
        # The consumer's exception is kept, not raised here, so that the transaction
        # commits (keeping the audit entry) before it is raised again; database errors
        # still roll back. Here and not in a generator this one delegates to: a consumer
        # closed part-way (a client gone) throws GeneratorExit, which `yield from` does
        # not hand to the generator it delegates to but raises at once, and the entry
        # was rolled back.
        failure: BaseException | None = None
        try:
            yield snapshot
        except DatabaseError:
            raise
        except BaseException as exc:
            failure = exc
        finally:
            snapshot.open = False
    if failure is not None:
        raise failure


@contextmanager
def _no_transaction() -> Iterator[None]:
    yield


# What happened to one file (or one whole resource) of an import.
CREATED = "created"
EXISTS = "exists"  # the id is in use in the target: never overwritten
DELETED = "deleted"  # the id was deleted in the target and stays reserved
MISSING_RESOURCE = "missing-resource"  # the target environment has no such resource
FAILED = "failed"  # unreadable, invalid or too large for the target


@dataclass(frozen=True)
class ImportOutcome:
    status: str
    resource_id: str
    document_id: str = ""
    message: str = ""
    files: int = 1


def export_read_manifest(raw: bytes, where: str) -> dict[str, Any]:
    """The manifest of an export (its bytes; `where` names the export in messages),
    checked well enough to import from."""
    path = f"{where}/{MANIFEST_NAME}"
    try:
        manifest = json_parse(raw)
    except InvalidRequest as exc:
        if exc.message.startswith("The body"):
            raise InvalidRequest(f"Cannot read {path}: {exc.message}") from exc
        raise
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InvalidRequest(f"{path} is not a memoryadmin export manifest.")
    if manifest.get("formatVersion") != FORMAT_VERSION:
        raise InvalidRequest(
            f"Export format version {manifest.get('formatVersion')!r} is not supported "
            f"(this version reads {FORMAT_VERSION})."
        )
    resources = manifest.get("resources")
    if not isinstance(resources, list):
        raise InvalidRequest(f"{path} has no list of resources.")
    for resource_id in resources:
        check_resource_id(resource_id)
    documents = manifest.get("documents")
    if isinstance(documents, bool) or not isinstance(documents, int) or documents < 0:
        raise InvalidRequest(f"{path} has no count of documents.")
    return manifest


def export_import(
    *,
    project: Project,
    environment: str,
    source: ImportSource,
    manifest: dict[str, Any],
    actor: str,
) -> Iterator[ImportOutcome]:
    """Creates every exported document that is free in the target; never overwrites.

    Each document is created as an owner write; the caller chooses the transaction
    (the CLI none, so an interrupted import keeps what it created and a rerun skips
    it; the API one for the whole import). An export that holds more or fewer documents
    than its manifest counts is incomplete or altered: refused before anything is
    created (400).
    """
    check_environment(environment)
    held = {
        resource_id: source.document_ids(resource_id)
        for resource_id in dict.fromkeys(manifest["resources"])
    }
    _check_count(manifest, sum(len(doc_ids) for doc_ids in held.values()))
    for resource_id, doc_ids in held.items():
        try:
            resource = resource_get(
                project=project, environment=environment, resource_id=resource_id
            )
            if not keeps_documents(resource):
                raise NotFound(f"'{resource_id}' is not a document resource in {environment}.")
        except NotFound as exc:
            yield ImportOutcome(
                MISSING_RESOURCE, resource_id, message=exc.message, files=len(doc_ids)
            )
            continue
        for doc_id in doc_ids:
            yield _import_file(resource, source, doc_id, actor)


def _check_count(manifest: dict[str, Any], held: int) -> None:
    """The documents an export holds (in the resources its manifest names) are the
    ones its manifest counts, or it is no whole export."""
    counted = manifest["documents"]
    if held != counted:
        raise InvalidRequest(
            f"The export's {MANIFEST_NAME} counts {counted} documents but the export holds "
            f"{held}: it is incomplete or altered, so nothing was imported.",
            details={"field": "body", "manifestDocuments": counted, "documents": held},
        )


def _import_file(
    resource: Resource, source: ImportSource, doc_id: str, actor: str
) -> ImportOutcome:
    resource_id, name = resource.resource_id, f"{doc_id}.json"
    try:
        # A damaged or lying archive is refused whole: only MemberUnreadable fails one file.
        raw = source.read(resource_id, doc_id)
    except MemberUnreadable as exc:
        return ImportOutcome(FAILED, resource_id, doc_id, str(exc))
    try:
        data = json_parse(raw)
    except InvalidRequest as exc:
        return ImportOutcome(FAILED, resource_id, doc_id, f"cannot read {name}: {exc.message}")
    try:
        fields = _document_fields(data, doc_id)
        document_create(resource=resource, doc_id=doc_id, actor=actor, **fields)
    except PreconditionFailed:
        try:
            document_get(resource=resource, doc_id=doc_id)
        except NotFound:
            return ImportOutcome(DELETED, resource_id, doc_id, "deleted here; the id is reserved")
        return ImportOutcome(EXISTS, resource_id, doc_id, "already exists; not overwritten")
    except DomainError as exc:  # invalid fields, or too large for the target resource
        return ImportOutcome(FAILED, resource_id, doc_id, exc.message)
    return ImportOutcome(CREATED, resource_id, doc_id)


def _document_fields(data: object, doc_id: str) -> dict[str, Any]:
    if not isinstance(data, dict) or data.get("id") != doc_id:
        raise InvalidRequest(f"{doc_id}.json is not an exported document with id '{doc_id}'.")
    fields: dict[str, Any] = {}
    for name in ("title", "text", "summary"):
        value = data.get(name, "")
        if not isinstance(value, str):
            raise InvalidRequest(f"{name} must be a string.")
        fields[name] = value
    # An exported document states its mode as it was shown: it is kept as the
    # document's own setting; a frozen one's, with the mode its unfreeze returns to.
    mode = check_agent_writes(data.get("agentWrites", "enabled"))
    fields.update(agent_write_fields(mode))
    if mode == "disabled" and UNFROZEN in data:
        unfrozen = data[UNFROZEN]
        if unfrozen not in ("enabled", "review"):
            raise InvalidRequest(f"{UNFROZEN} must be 'enabled' or 'review'.")
        fields["agent_review"] = agent_write_fields(unfrozen)["agent_review"]
    return fields
