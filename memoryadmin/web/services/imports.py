"""Import on the Memory page: an uploaded export zip, bounded as the API's upload is
(memoryadmin.memory.imports.upload_max), kept until the owner confirms its dry run.

The import itself is the API's (memoryadmin.memory.services.transfer.import_zip): the
dry run is that import rolled back, the confirmation that import committed. Between the
two the zip waits in `var/imports/<project>/<environment>/<token>.zip` (mode 0600): one
per project and environment (a new upload its dry run accepts replaces it; one it
refuses is not kept), removed once imported, and never older than PENDING_SECONDS.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import time
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.files.uploadhandler import FileUploadHandler, TemporaryFileUploadHandler
from django.db import transaction

from memoryadmin.core.erasing import RedactedVersion, stored_forms
from memoryadmin.core.errors import InvalidRequest, NotFound
from memoryadmin.core.jsonbody import declared_check, too_large
from memoryadmin.files import private_dir
from memoryadmin.memory.imports import upload_max

PENDING_SECONDS = 3600
_TOKEN = re.compile(r"[0-9a-f]{32}")


class BoundedUploadHandler(TemporaryFileUploadHandler):
    """Spools an upload to a temporary file and refuses it (413) as soon as it is over
    the largest zip an import may hold, declared or counted."""

    def __init__(self, request: Any = None) -> None:
        super().__init__(request)
        self.limit = upload_max()
        self.size = 0

    def handle_raw_input(self, input_data: Any, META: Any, content_length: int, *args: Any) -> None:
        declared_check(META.get("CONTENT_LENGTH"), self.limit)

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes | None:
        self.size += len(raw_data)
        if self.size > self.limit:
            raise too_large(self.size, self.limit)
        return super().receive_data_chunk(raw_data, start)


def upload_handlers(request: Any) -> list[FileUploadHandler]:
    return [BoundedUploadHandler(request)]


def _folder(project_id: str, environment: str) -> Path:
    return Path(settings.VAR_DIR) / "imports" / project_id / environment


def _stale(folder: Path) -> None:
    now = time.time()
    for path in folder.glob("*.zip"):
        try:
            if now - path.stat().st_mtime > PENDING_SECONDS:
                path.unlink()
        except FileNotFoundError:
            pass


@contextmanager
def pending_keep(*, project_id: str, environment: str, upload: IO[bytes]) -> Iterator[str]:
    """Keeps an uploaded zip for its confirmation while the block (its dry run) checks it,
    under the token it yields. Refused (the block raises), the zip is removed and the one
    waiting there stays; accepted, it replaces the one waiting."""
    folder = private_dir(_folder(project_id, environment))
    token = secrets.token_hex(16)
    target = folder / f"{token}.zip"
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            upload.seek(0)
            shutil.copyfileobj(upload, file)
        yield token
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    for path in folder.glob("*.zip"):
        if path != target:
            path.unlink(missing_ok=True)


def pending_path(*, project_id: str, environment: str, token: str) -> Path:
    """The zip waiting under `token` (404 once imported, replaced or expired)."""
    if not isinstance(token, str) or not _TOKEN.fullmatch(token):
        raise InvalidRequest("That upload is not valid; upload the export again.")
    folder = _folder(project_id, environment)
    if folder.is_dir():
        _stale(folder)
    path = folder / f"{token}.zip"
    if not path.is_file():
        raise NotFound(
            "That upload is no longer waiting (imported, replaced or expired); "
            "upload the export again."
        )
    return path


def pending_erase(
    *, project_id: str, environment: str, needles: Sequence[str], apply: bool
) -> dict[str, int]:
    """An erasure's part here: the uploads waiting for their import whose documents hold
    any of `needles` (read member by member, within the upload bound), deleted with
    `apply` once the erasure commits; how many there are."""
    forms = [form.encode() for needle in needles for form in stored_forms(needle)]
    return {"exports": _pending_delete(project_id, environment, forms, apply=apply)}


def pending_redact(*, version: RedactedVersion, marker: str) -> int:
    """A redaction's part here: the uploads waiting for their import that hold the
    version (an export of its document made while it was current names its revision),
    deleted once the redaction commits; how many."""
    forms = [version.revision.encode()]
    return _pending_delete(version.project_id, version.environment, forms, apply=True)


def _pending_delete(project_id: str, environment: str, forms: list[bytes], *, apply: bool) -> int:
    """The uploads holding any of `forms`, deleted with `apply` when the transaction
    commits (a rolled back erasure or redaction keeps them); how many there are."""
    folder = _folder(project_id, environment)
    if not folder.is_dir() or not forms:
        return 0
    held = 0
    for path in sorted(folder.glob("*.zip")):
        if not _holds_any(path, forms):
            continue
        held += 1
        if apply:
            transaction.on_commit(partial(path.unlink, missing_ok=True))
    return held


def _holds_any(path: Path, forms: list[bytes]) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.infolist():
                if member.file_size > upload_max():
                    return True  # not readable within the bound: not kept either
                data = archive.read(member)
                if any(form in data for form in forms):
                    return True
    except FileNotFoundError:
        return False
    except (zipfile.BadZipFile, OSError, ValueError):
        return True  # an upload nobody can import goes with an erasure or a redaction
    return False
