"""Exports and imports over HTTP: the export zip checked before it streams, and an
uploaded export zip imported whole or not at all.

The zip is the one the Memory page downloads (`<resource>/<id>.json` plus
`manifest.json`); it goes through the import of an export directory
(memoryadmin.memory.export), read within the bounds of memoryadmin.memory.imports.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import IO, Any

from django.db import transaction

from memoryadmin.core.environments import check_environment
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.memory.export import (
    CREATED,
    FAILED,
    MANIFEST_NAME,
    MISSING_RESOURCE,
    ImportOutcome,
    export_import,
    export_read_manifest,
)
from memoryadmin.memory.imports import Deadline, ExportZip, import_slot, seconds_max
from memoryadmin.memory.models import Project
from memoryadmin.memory.services.deployments import resource_get

# What an import reports per document: created, or skipped (the id exists, was
# deleted, or its resource is missing here) or failed (unreadable, invalid, too large).
SKIPPED = "skipped"


def export_resources_check(
    *, project: Project, environment: str, resource_ids: list[str] | None
) -> None:
    """Refuses unknown resources before an export starts streaming (404, 400)."""
    check_environment(environment)
    for resource_id in resource_ids or []:
        resource_get(project=project, environment=environment, resource_id=resource_id)


@dataclass
class ImportReport:
    counts: Counter[str] = field(default_factory=Counter)
    documents: list[dict[str, Any]] = field(default_factory=list)

    def add(self, status: str, resource_id: str, doc_id: str, reason: str, message: str) -> None:
        self.counts[status] += 1
        self.documents.append(
            {
                "resource": resource_id,
                "id": doc_id,
                "status": status,
                "reason": reason or None,
                "message": message,
            }
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "created": self.counts[CREATED],
            "skipped": self.counts[SKIPPED],
            "failed": self.counts[FAILED],
            "documents": self.documents,
        }


def _manifest(archive: ExportZip) -> dict[str, Any]:
    raw = archive.manifest_bytes()  # over its limit, damaged or lying: refused as it is
    try:
        manifest = export_read_manifest(raw, "the zip")
    except InvalidRequest as exc:
        raise InvalidRequest(
            f"The zip is not a memoryadmin export: its {MANIFEST_NAME} is invalid ({exc.message})"
        ) from exc
    archive.check_resources(manifest["resources"])
    return manifest


def import_zip(
    *, project: Project, environment: str, upload: IO[bytes], actor: str, dry_run: bool = False
) -> ImportReport:
    """Creates every document of an export zip that is free here; never overwrites.

    One import per project at a time (429 otherwise). The archive is checked whole
    before anything is created: its directory (members, names, sizes), then every
    member inflated within its bounds (400, 413), and each document again, in the same
    bounds, as it is created (the bytes are not kept between). The documents are
    created in one transaction, so an import past its deadline (413) creates
    nothing either. A `dry_run` is the same import, every rule and write, in a
    transaction rolled back at its end: its report is what the import would do now,
    and it leaves nothing behind (no document, audit entry or webhook delivery).
    """
    check_environment(environment)
    deadline = Deadline(seconds_max())
    with import_slot(project.id), ExportZip(upload, deadline) as archive:
        manifest = _manifest(archive)
        archive.verify()
        report = ImportReport()
        with transaction.atomic():
            for outcome in export_import(
                project=project,
                environment=environment,
                source=archive,
                manifest=manifest,
                actor=actor,
            ):
                _report_outcome(report, archive, outcome)
                deadline.check()
            if dry_run:
                transaction.set_rollback(True)
    return report


def _report_outcome(report: ImportReport, archive: ExportZip, outcome: ImportOutcome) -> None:
    if outcome.status == MISSING_RESOURCE:
        # One outcome for the whole resource: the report still names every id.
        for doc_id in archive.document_ids(outcome.resource_id):
            report.add(SKIPPED, outcome.resource_id, doc_id, MISSING_RESOURCE, outcome.message)
        return
    if outcome.status == CREATED:
        report.add(CREATED, outcome.resource_id, outcome.document_id, "", "")
    elif outcome.status == FAILED:
        report.add(FAILED, outcome.resource_id, outcome.document_id, "invalid", outcome.message)
    else:  # exists, or deleted here: never overwritten
        report.add(
            SKIPPED, outcome.resource_id, outcome.document_id, outcome.status, outcome.message
        )
