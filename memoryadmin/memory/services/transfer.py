"""Exports and imports over HTTP: the export zip checked before it streams, and an
uploaded export zip imported document by document.

The zip is the one the Memory page downloads (`<resource>/<id>.json` plus
`manifest.json`); it is read in place through `zipfile.Path`, so the import
rules are exactly those of an export directory (memoryadmin.memory.export).
"""

from __future__ import annotations

import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from memoryadmin.memory.environments import check_environment
from memoryadmin.memory.errors import InvalidRequest, LimitExceeded
from memoryadmin.memory.export import (
    CREATED,
    FAILED,
    MANIFEST_NAME,
    MISSING_RESOURCE,
    ImportOutcome,
    export_import,
    export_read_manifest,
)
from memoryadmin.memory.models import Project
from memoryadmin.memory.services.deployments import resource_get

# The largest export zip an import takes over HTTP (the CLI reads directories of any size).
IMPORT_MAX_BYTES = 512 * 1024 * 1024
# One exported document is at most a few tens of KiB of JSON (16 KiB of text,
# escaped); a member that claims more is not one of ours.
MEMBER_MAX_BYTES = 1024 * 1024

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


def _open_zip(upload: IO[bytes]) -> zipfile.ZipFile:
    try:
        archive = zipfile.ZipFile(upload)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise InvalidRequest("The body is not a zip archive.") from exc
    # Messages name members by path; an upload has no file name of its own.
    archive.filename = "upload.zip"
    for info in archive.infolist():
        if info.file_size > MEMBER_MAX_BYTES:
            archive.close()
            raise LimitExceeded(
                f"{info.filename} is over {MEMBER_MAX_BYTES} bytes: not an exported document.",
                field="body",
                bytes=info.file_size,
                max_bytes=MEMBER_MAX_BYTES,
            )
    try:
        # Every member's checksum, before anything is created: a damaged
        # archive is refused whole rather than imported in part.
        damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:
        archive.close()
        raise InvalidRequest(f"The zip cannot be read: {exc}") from exc
    if damaged is not None:
        archive.close()
        raise InvalidRequest(f"The zip is damaged: {damaged} fails its checksum.")
    return archive


def _manifest(root: Path) -> dict[str, Any]:
    try:
        return export_read_manifest(root)
    except InvalidRequest as exc:
        # The directory reader names a path; here the archive is the body.
        raise InvalidRequest(
            f"The zip is not a memoryadmin export: its {MANIFEST_NAME} is missing or invalid."
        ) from exc
    except (zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise InvalidRequest(f"The zip's {MANIFEST_NAME} cannot be read.") from exc


def import_zip(
    *, project: Project, environment: str, upload: IO[bytes], actor: str
) -> ImportReport:
    """Creates every document of an export zip that is free here; never overwrites.

    A bad archive or manifest is refused (400) before anything is created. Each
    document is then created in its own transaction, as the CLI's import does.
    """
    check_environment(environment)
    archive = _open_zip(upload)
    # zipfile.Path reads like a directory: the import takes it as one.
    root = cast(Path, zipfile.Path(archive))
    manifest = _manifest(root)
    report = ImportReport()
    with archive:
        for outcome in export_import(
            project=project, environment=environment, source=root, manifest=manifest, actor=actor
        ):
            _report_outcome(report, root, outcome)
    return report


def _report_outcome(report: ImportReport, root: Path, outcome: ImportOutcome) -> None:
    if outcome.status == MISSING_RESOURCE:
        # One outcome for the whole resource: the report still names every id.
        for path in sorted((root / outcome.resource_id).glob("*.json"), key=lambda p: p.name):
            report.add(SKIPPED, outcome.resource_id, path.stem, MISSING_RESOURCE, outcome.message)
        return
    if outcome.status == CREATED:
        report.add(CREATED, outcome.resource_id, outcome.document_id, "", "")
    elif outcome.status == FAILED:
        report.add(FAILED, outcome.resource_id, outcome.document_id, "invalid", outcome.message)
    else:  # exists, or deleted here: never overwritten
        report.add(
            SKIPPED, outcome.resource_id, outcome.document_id, outcome.status, outcome.message
        )
