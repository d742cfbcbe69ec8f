"""The export download (page and API): an open export snapshot streamed as a zip, one
document at a time."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator

from django.http import StreamingHttpResponse
from django.utils import timezone

from memoryadmin.memory.export import MANIFEST_NAME, ExportSnapshot, export_file, export_snapshot
from memoryadmin.memory.models import Project


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
    response = StreamingHttpResponse(stream(), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["Cache-Control"] = "no-store"
    return response
