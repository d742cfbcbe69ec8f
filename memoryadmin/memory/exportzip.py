"""The export download (page and API): an open export snapshot streamed as a zip, one
document at a time; and what every download of a project's data shares (its audit log's
too).

A download holds a request thread, a database connection and (an export) its snapshot for
as long as it streams, so a project runs one of each kind at a time, across processes and
instances (its slot in the shared cache: a second is refused with 429 until the first
ends), and each within `MEMORYADMIN_EXPORT_SECONDS`: past it the stream stops, and the
server ends the connection without ending the answer, so the client sees it unfinished
(an export's zip lacks its manifest, which is last).
"""

from __future__ import annotations

import time
import zipfile
from collections.abc import Iterator

from django.conf import settings
from django.http import StreamingHttpResponse
from django.utils import timezone

from memoryadmin.core.sharedcache import Slot, slot_take
from memoryadmin.memory.export import MANIFEST_NAME, ExportSnapshot, export_file, export_snapshot
from memoryadmin.memory.imports import TransferBusy
from memoryadmin.memory.models import Project

# A download's slot lasts this long unless its stream goes on: the stream makes it last
# as long again at most every `SLOT_KEPT_EVERY` seconds, so a process that dies mid-way
# frees it within a minute, and a write held up by a slow client (at most
# GUNICORN_CLIENT_TIMEOUT, 30 s) does not outlast it.
SLOT_SECONDS = 60
SLOT_KEPT_EVERY = 15.0


class DownloadTimedOut(TimeoutError):
    """A download ran past MEMORYADMIN_EXPORT_SECONDS: its stream stops, unfinished (the
    request log's warning line; the shipped server closes the connection without ending
    the answer, memoryadmin/serving.py)."""


def download_slot(name: str, project_id: str, busy: TransferBusy) -> Slot:
    """Takes the project's one slot for downloads of `name` (its export, its audit log).
    Raises `busy` while another holds it."""
    slot = slot_take(f"{name}:{project_id}", SLOT_SECONDS)
    if slot is None:
        raise busy
    return slot


class Download:
    """A download's stream within its seconds (`MEMORYADMIN_EXPORT_SECONDS` from now), and
    its project's slot (`download_slot`), kept while it streams and given back when the
    stream is closed (the server closes every response, finished or not)."""

    def __init__(self, stream: Iterator[bytes] | Iterator[str], slot: Slot, what: str) -> None:
        self.stream = stream
        self.slot: Slot | None = slot
        self.what = what
        self.seconds = float(settings.MEMORYADMIN_EXPORT_SECONDS)
        self.deadline = time.monotonic() + self.seconds

    def __iter__(self) -> Iterator[bytes | str]:
        kept = time.monotonic()
        for chunk in self.stream:
            # Each chunk is made, then sent only within the deadline: the last one (an
            # export's manifest) is never sent late, and nothing is stopped once sent.
            now = time.monotonic()
            if now > self.deadline:  # logged by the request log (memoryadmin/logs.py)
                raise DownloadTimedOut(
                    f"The {self.what} stopped unfinished at its deadline "
                    f"(MEMORYADMIN_EXPORT_SECONDS, {self.seconds:g} s)."
                )
            if now - kept >= SLOT_KEPT_EVERY and self.slot is not None:
                self.slot.keep()
                kept = now
            yield chunk

    def close(self) -> None:
        try:
            close = getattr(self.stream, "close", None)
            if close is not None:
                close()
        finally:
            if self.slot is not None:
                self.slot.give()
                self.slot = None


def download_response(
    slot: Slot,
    stream: Iterator[bytes] | Iterator[str],
    content_type: str,
    filename: str,
    what: str,
) -> StreamingHttpResponse:
    """A file to download, streamed as `Download` does, holding `slot` (`download_slot`)
    until the server closes it (given back at once if the response cannot be made)."""
    try:
        response = StreamingHttpResponse(Download(stream, slot, what), content_type=content_type)
    except BaseException:
        slot.give()
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
    slot = download_slot(
        "memory-export", project.id, TransferBusy("exporting", "export", "export_in_progress")
    )

    def stream() -> Iterator[bytes]:
        # The snapshot stays open while the response streams: on PostgreSQL
        # every file comes from the same REPEATABLE READ transaction.
        with export_snapshot(
            project=project,
            environment=environment,
            resource_ids=wanted,
            doc_ids=doc_ids,
            actor=who,
        ) as snapshot:
            yield from export_zip(snapshot)

    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    name = f"memory-{project.id}-{environment}-{stamp}.zip"
    return download_response(slot, stream(), "application/zip", name, f"export of {project.id}")
