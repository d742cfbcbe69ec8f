"""The export download (page and API): an open export snapshot streamed as a zip, one
document at a time.

A download holds a request thread, a database connection and its snapshot for as long as
it streams, so a project runs one at a time, across processes and instances (its slot in
the shared cache: a second is refused with 429 until the first ends), and each within
`MEMORYADMIN_EXPORT_SECONDS`: past it the stream stops before the manifest, which is
last, so the archive reads as incomplete.
"""

from __future__ import annotations

import logging
import math
import time
import zipfile
from collections.abc import Iterator

from django.conf import settings
from django.http import StreamingHttpResponse
from django.utils import timezone

from memoryadmin.core.sharedcache import slot_give, slot_take
from memoryadmin.memory.export import MANIFEST_NAME, ExportSnapshot, export_file, export_snapshot
from memoryadmin.memory.imports import BUSY_RETRY_SECONDS, TransferBusy
from memoryadmin.memory.models import Project

logger = logging.getLogger(__name__)


class ExportTimedOut(Exception):
    """The download ran past MEMORYADMIN_EXPORT_SECONDS: its stream stops, unfinished."""


def download_slot(name: str, project_id: str, busy: TransferBusy) -> str:
    """Takes the project's one slot for downloads of `name` (its export, its audit log):
    a download holds a request thread and a database connection while it streams. Raises
    `busy` while another holds it; the slot expires with an export's deadline."""
    slot = f"{name}:{project_id}"
    if not slot_take(slot, math.ceil(settings.MEMORYADMIN_EXPORT_SECONDS) + BUSY_RETRY_SECONDS):
        raise busy
    return slot


class Download:
    """A download's stream, and its project's slot (`download_slot`), given back when the
    stream is closed (the server closes every response, finished or not)."""

    def __init__(self, stream: Iterator[bytes] | Iterator[str], slot: str) -> None:
        self.stream = stream
        self.slot: str | None = slot

    def __iter__(self) -> Iterator[bytes] | Iterator[str]:
        return self.stream

    def close(self) -> None:
        try:
            close = getattr(self.stream, "close", None)
            if close is not None:
                close()
        finally:
            if self.slot is not None:
                slot_give(self.slot)
                self.slot = None


def download_response(
    slot: str, stream: Iterator[bytes] | Iterator[str], content_type: str, filename: str
) -> StreamingHttpResponse:
    """A file to download, streamed, holding `slot` (`download_slot`) until the server
    closes it (given back at once if the response cannot be made)."""
    try:
        response = StreamingHttpResponse(Download(stream, slot), content_type=content_type)
    except BaseException:
        slot_give(slot)
        raise
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    return response


class _Sink:
    """A write-only file whose bytes are handed on as they are written.

    zipfile streams to unseekable files (it writes data descriptors), so the
    archive never has to exist whole in memory or on disk.
    """

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._written = 0

    def write(self, data: bytes) -> int:
        self._chunks.append(bytes(data))
        self._written += len(data)
        return len(data)

    def tell(self) -> int:
        return self._written

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        data = b"".join(self._chunks)
        self._chunks.clear()
        return data


def export_zip(snapshot: ExportSnapshot) -> Iterator[bytes]:
    """`<resource>/<id>.json` for every document, then manifest.json, as zip bytes."""
    sink = _Sink()
    written = 0
    with zipfile.ZipFile(sink, mode="w", compression=zipfile.ZIP_DEFLATED) as archive:  # type: ignore[call-overload]
        for resource_id in snapshot.resources:
            archive.writestr(f"{resource_id}/", "")
        for resource_id, document in snapshot.documents():
            archive.writestr(f"{resource_id}/{document['id']}.json", export_file(document))
            written += 1
            yield sink.take()
        # Last, as in the CLI's directories: an archive with a manifest is complete.
        archive.writestr(MANIFEST_NAME, export_file({**snapshot.manifest(), "documents": written}))
    yield sink.take()


def export_download(
    project: Project,
    environment: str,
    wanted: list[str] | None,
    who: str,
    doc_ids: list[str] | None = None,
) -> StreamingHttpResponse:
    seconds = float(settings.MEMORYADMIN_EXPORT_SECONDS)
    slot = download_slot(
        "memory-export", project.id, TransferBusy("exporting", "export", "export_in_progress")
    )

    def stream() -> Iterator[bytes]:
        deadline = time.monotonic() + seconds
        # The snapshot stays open while the response streams: on PostgreSQL
        # every file comes from the same REPEATABLE READ transaction.
        with export_snapshot(
            project=project,
            environment=environment,
            resource_ids=wanted,
            doc_ids=doc_ids,
            actor=who,
        ) as snapshot:
            for chunk in export_zip(snapshot):
                yield chunk
                if time.monotonic() > deadline:
                    logger.warning(
                        "The export of project %s stopped at its deadline (%g s) unfinished.",
                        project.id,
                        seconds,
                    )
                    raise ExportTimedOut(f"past MEMORYADMIN_EXPORT_SECONDS ({seconds:g} s)")

    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    name = f"memory-{project.id}-{environment}-{stamp}.zip"
    return download_response(slot, stream(), "application/zip", name)
