"""What an import may read: the bounds of an export, checked before anything is inflated
or created, and the two places an export is read from.

An export zip (the API's import) is checked from its end record and central directory
before any member is inflated: at most `documents_max()` documents, each no larger than
the largest document file an export writes (`MEMBER_MAX_BYTES`, from the document
limits), names that an export writes and nothing else (no `..`, no absolute paths, no
links, no duplicates), stored or deflated members whose declared sizes a deflate stream
can hold. Declared sizes are then not trusted alone: every member is inflated in chunks
and refused the moment it runs past its declared size or the member limit, or ends
short of it, and the whole import has a wall-clock deadline (`seconds_max()`). A
project runs one API import at a time (`import_slot`).

An export directory (the CLI's import) is the operator's own: any number of
documents, no deadline, but each file is read only if it is a regular file (no links)
within the same member limit; anything else fails that file.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import stat
import struct
import time
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Protocol

from django.conf import settings
from django.db import IntegrityError, transaction

from memoryadmin.core.dbclock import db_after, db_now
from memoryadmin.core.errors import DomainError, InvalidRequest, LimitExceeded
from memoryadmin.memory.limits import (
    DOCUMENT_ID_RE,
    MAX_BYTES_MAX,
    RESOURCE_ID_MAX,
    RESOURCE_ID_RE,
    SUMMARY_MAX_BYTES,
    TITLE_MAX_BYTES,
)
from memoryadmin.memory.models import ImportSlot

MANIFEST_NAME = "manifest.json"
DOCUMENT_SUFFIX = ".json"

# The largest document file an export writes: JSON escapes a control character as
# six bytes (\u0001), so title, text and summary at their limits take at most six
# times their bytes, plus the other fields (id, revision, times, writer, modes) and the
# indentation.
MEMBER_MAX_BYTES = 6 * (MAX_BYTES_MAX + TITLE_MAX_BYTES + SUMMARY_MAX_BYTES) + 4096
# Resources named by one import. A deployment declares its resources in one JSON body
# of at most 64 KiB, which holds fewer than 2,000 of them; this leaves room for those
# that earlier deployments retired.
RESOURCES_MAX = 4096
# The manifest at RESOURCES_MAX resource ids of the longest kind (one indented line
# each), plus its other fields.
MANIFEST_MAX_BYTES = RESOURCES_MAX * (RESOURCE_ID_MAX + 8) + 4096
# `<resource>/<id>.json`, the longest member name an export writes.
NAME_MAX = RESOURCE_ID_MAX + 1 + 128 + len(DOCUMENT_SUFFIX)
# Extra fields and comment a zip tool may add to one header (an export adds none).
EXTRA_MAX = 128
# One member's headers at most: local header, data descriptor, central directory entry.
CENTRAL_ENTRY_MAX = 46 + NAME_MAX + EXTRA_MAX
MEMBER_OVERHEAD_MAX = 30 + NAME_MAX + EXTRA_MAX + 24 + CENTRAL_ENTRY_MAX
# The end of central directory record and the longest archive comment.
END_RECORD_MAX = 22 + 0x10000
# Deflate never inflates one byte into more than 1,032 (a 258-byte match in two bits);
# a member declaring more than that (plus a block's worth) declares a lie.
DEFLATE_RATIO_MAX = 1032
DEFLATE_SLACK_BYTES = 1024
READ_CHUNK_BYTES = 64 * 1024
# Seconds a client waits before trying again when its project's import slot is taken.
BUSY_RETRY_SECONDS = 5

_END_RECORD = struct.Struct("<4s4H2LH")
_END_SIGNATURE = b"PK\x05\x06"
_ZIP64_LOCATOR = struct.Struct("<4sLQL")  # signature, disk, offset, disks
_ZIP64_LOCATOR_SIGNATURE = b"PK\x06\x07"
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")
_LOCAL_SIGNATURE = b"PK\x03\x04"
_DOCUMENT_NAME = re.compile(
    rf"({RESOURCE_ID_RE.pattern})/({DOCUMENT_ID_RE.pattern}){re.escape(DOCUMENT_SUFFIX)}"
)
_FOLDER_NAME = re.compile(rf"({RESOURCE_ID_RE.pattern})/")
_ENCRYPTED = 0x1
_UNSUPPORTED_FLAGS = 0x20 | 0x40  # compressed patched data, strong encryption


def documents_max() -> int:
    """Documents one import over the API may hold (MEMORYADMIN_IMPORT_DOCUMENTS_MAX)."""
    return int(settings.MEMORYADMIN_IMPORT_DOCUMENTS_MAX)


def seconds_max() -> float:
    """Seconds one import over the API may take, all of it (MEMORYADMIN_IMPORT_SECONDS)."""
    return float(settings.MEMORYADMIN_IMPORT_SECONDS)


def members_max() -> int:
    """Members of an import zip: its documents, a folder per resource and the manifest."""
    return documents_max() + RESOURCES_MAX + 1


def inflated_max() -> int:
    """Bytes every member of an import zip may inflate to, together."""
    return documents_max() * MEMBER_MAX_BYTES + MANIFEST_MAX_BYTES


def upload_max() -> int:
    """The largest import zip: every member at its limit, stored, with its headers."""
    return inflated_max() + members_max() * MEMBER_OVERHEAD_MAX + END_RECORD_MAX


class ImportLimitExceeded(LimitExceeded):
    """Over one of an import's limits (413), naming the member when it is one."""

    def __init__(
        self, message: str, *, bytes: int, max_bytes: int, member: str | None = None
    ) -> None:
        super().__init__(message, field="body", bytes=bytes, max_bytes=max_bytes)
        if member is not None:
            self.details["member"] = member


class ImportTooManyMembers(DomainError):
    """More documents or members than one import may hold (413)."""

    status = 413
    code = "memory_limit_exceeded"

    def __init__(self, message: str, *, members: int, max_members: int) -> None:
        super().__init__(
            message, details={"field": "body", "members": members, "maxMembers": max_members}
        )


class ImportTimedOut(DomainError):
    """The import ran past its deadline; everything it did is rolled back (413)."""

    status = 413
    code = "memory_limit_exceeded"

    def __init__(self, seconds: float) -> None:
        super().__init__(
            f"The import did not finish within {seconds:g} seconds, so nothing was "
            "imported: import fewer documents at a time (one resource at a time, or "
            "the command line's `memory import` of the unzipped export).",
            details={"field": "body", "maxSeconds": seconds},
        )


class TransferBusy(DomainError):
    """The project is importing, exporting or downloading its audit log already, one at
    a time: nothing was read; retry later (429)."""

    status = 429
    code = "rate_limited"

    def __init__(self, doing: str, one: str, reason: str) -> None:
        super().__init__(
            f"This project is {doing} already; one {one} runs at a time.",
            details={"reason": reason},
            retry_after=BUSY_RETRY_SECONDS,
        )


def not_a_member(name: str, why: str) -> InvalidRequest:
    return InvalidRequest(
        f"The zip's member {name!r} {why}: it is not one an export writes; nothing was imported.",
        details={"field": "body", "member": name},
    )


class Deadline:
    """The wall-clock end of one import."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def check(self) -> None:
        if time.monotonic() > self.at:
            raise ImportTimedOut(self.seconds)


@contextmanager
def import_slot(project_id: str) -> Iterator[None]:
    """The project's one import slot, held for the import (TransferBusy when taken).

    A row of the database (ImportSlot), so every process and instance sees it, whatever
    the cache; it lasts the import's deadline, so a process that dies holding it frees
    it then. Taken outside any transaction of the import's: it must be seen before the
    import's writes are.
    """
    token = secrets.token_hex(16)
    _slot_take(project_id, token)
    try:
        yield
    finally:
        ImportSlot.objects.filter(project_id=project_id, token=token).delete()


def _slot_take(project_id: str, token: str) -> None:
    # Its expiry is the database's clock, as every lease's (core/dbclock.py).
    now = db_now()
    until = db_after(math.ceil(seconds_max()) + BUSY_RETRY_SECONDS)
    slots = ImportSlot.objects.filter(project_id=project_id)
    # A read first: a slot held is refused without a write, which on SQLite would wait
    # for the write lock an import in its write phase holds.
    if slots.filter(until__gt=now).exists():
        raise TransferBusy("importing", "import", "import_in_progress")
    # One statement takes an expired slot (of one who died holding it), one insert a
    # missing one: of two at once, one changes no row or meets the other's key.
    if slots.filter(until__lte=now).update(token=token, until=until):
        return
    try:
        with transaction.atomic():
            ImportSlot.objects.create(project_id=project_id, token=token, until=until)
    except IntegrityError:
        raise TransferBusy("importing", "import", "import_in_progress") from None


class MemberUnreadable(Exception):
    """One document file cannot be read: that document fails, the import goes on."""


class ImportSource(Protocol):
    """Where an import reads an export from: its manifest and its document files."""

    def manifest_bytes(self) -> bytes: ...

    def document_ids(self, resource_id: str) -> list[str]: ...

    def read(self, resource_id: str, doc_id: str) -> bytes: ...


class ExportDirectory:
    """An export written as files (`manage.py memory export`)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def manifest_bytes(self) -> bytes:
        path = self.root / MANIFEST_NAME
        try:
            return _read_file(path, MANIFEST_MAX_BYTES)
        except FileNotFoundError as exc:
            raise InvalidRequest(
                f"{self.root} has no {MANIFEST_NAME}; it is not an export."
            ) from exc
        except MemberUnreadable as exc:
            raise InvalidRequest(f"Cannot read {path}: {exc}") from exc

    def document_ids(self, resource_id: str) -> list[str]:
        folder = self.root / resource_id
        if folder.is_symlink() or not folder.is_dir():
            return []
        return sorted(p.stem for p in folder.glob(f"*{DOCUMENT_SUFFIX}"))

    def read(self, resource_id: str, doc_id: str) -> bytes:
        path = self.root / resource_id / f"{doc_id}{DOCUMENT_SUFFIX}"
        try:
            return _read_file(path, MEMBER_MAX_BYTES)
        except FileNotFoundError as exc:
            raise MemberUnreadable(f"cannot read {path.name}: it is gone") from exc


def _read_file(path: Path, limit: int) -> bytes:
    """A regular file's bytes, never following a link and never reading past `limit`.

    Opened without blocking (a FIFO waits for a writer, a device may wait forever) and
    checked to be a regular file before anything is read: a folder or a FIFO under an
    exported name fails that file, as a link does."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if path.is_symlink():
            raise MemberUnreadable(f"{path.name} is a link, not an exported file") from exc
        raise MemberUnreadable(f"cannot read {path.name}: {exc.strerror}") from exc
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    if not regular:
        os.close(fd)
        raise MemberUnreadable(f"{path.name} is not a regular file")
    with os.fdopen(fd, "rb") as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        raise MemberUnreadable(f"{path.name} is over {limit} bytes: not an exported document")
    return data


class ExportZip:
    """An export zip, checked whole from its directory when opened; members read bounded."""

    def __init__(self, upload: IO[bytes], deadline: Deadline) -> None:
        self.deadline = deadline
        self.upload = upload
        size = _check_end_record(upload)
        try:
            self.archive = zipfile.ZipFile(upload)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise InvalidRequest("The body is not a zip archive.") from exc
        try:
            self.documents = _check_directory(self.archive.infolist(), size)
        except BaseException:
            self.archive.close()
            raise

    def __enter__(self) -> ExportZip:
        return self

    def __exit__(self, *exc: object) -> None:
        self.archive.close()

    def manifest_bytes(self) -> bytes:
        try:
            info = self.archive.getinfo(MANIFEST_NAME)
        except KeyError as exc:
            raise InvalidRequest(f"The zip has no {MANIFEST_NAME}; it is not an export.") from exc
        return self._inflate(info)

    def check_resources(self, resources: list[str]) -> None:
        """Refuses members of resources the manifest does not name."""
        named = set(resources)
        for info in self.archive.infolist():
            resource_id = info.orig_filename.split("/", 1)[0]
            if info.orig_filename != MANIFEST_NAME and resource_id not in named:
                raise not_a_member(
                    info.orig_filename, "is in a resource the manifest does not name"
                )

    def verify(self) -> None:
        """Inflates every member once, bounded, so a damaged or lying one is refused
        before anything is created."""
        for info in self.archive.infolist():
            if not info.is_dir():
                self._inflate(info)

    def document_ids(self, resource_id: str) -> list[str]:
        return sorted(self.documents.get(resource_id, ()))

    def read(self, resource_id: str, doc_id: str) -> bytes:
        return self._inflate(self.archive.getinfo(f"{resource_id}/{doc_id}{DOCUMENT_SUFFIX}"))

    def _inflate(self, info: zipfile.ZipInfo) -> bytes:
        """A member's bytes, inflated here in chunks from its raw data: refused the moment
        it runs past its declared size (or the member limit), and when it ends short of
        it, leaves data over or fails its checksum."""
        name = info.orig_filename
        limit = min(info.file_size, _member_limit(name))
        inflater = (
            zlib.decompressobj(-zlib.MAX_WBITS)
            if info.compress_type == zipfile.ZIP_DEFLATED
            else None
        )
        data = bytearray()
        try:
            for chunk in self._raw_chunks(info):
                pending = chunk
                while pending:
                    if inflater is None:
                        piece, pending = pending, b""
                    else:
                        if inflater.eof:
                            raise _damaged(name, "data past the end of its stream")
                        # At most one byte past the limit: never more is inflated.
                        piece = inflater.decompress(pending, limit + 1 - len(data))
                        pending = inflater.unconsumed_tail
                    data += piece
                    if len(data) > limit:
                        raise not_a_member(name, f"inflates past its declared {limit} bytes")
                self.deadline.check()
        except zlib.error as exc:
            raise _damaged(name, str(exc)) from exc
        if inflater is not None and not inflater.eof:
            raise _damaged(name, "its stream is cut short")
        if len(data) != info.file_size:
            raise not_a_member(
                name, f"holds {len(data)} bytes where its header says {info.file_size}"
            )
        if zlib.crc32(data) != info.CRC:
            raise _damaged(name, "it fails its checksum")
        return bytes(data)

    def _raw_chunks(self, info: zipfile.ZipInfo) -> Iterator[bytes]:
        """A member's stored bytes, after its local header (which must name it)."""
        name = info.orig_filename
        self.upload.seek(info.header_offset)
        header = self.upload.read(_LOCAL_HEADER.size)
        if len(header) != _LOCAL_HEADER.size or header[:4] != _LOCAL_SIGNATURE:
            raise _damaged(name, "its local header is missing")
        name_length, extra_length = _LOCAL_HEADER.unpack(header)[-2:]
        if self.upload.read(name_length) != name.encode("ascii"):
            raise _damaged(name, "its local header names another member")
        self.upload.seek(extra_length, os.SEEK_CUR)
        left = info.compress_size
        while left > 0:
            chunk = self.upload.read(min(READ_CHUNK_BYTES, left))
            if not chunk:
                raise _damaged(name, "the archive ends inside it")
            left -= len(chunk)
            yield chunk


def _damaged(name: str, why: str) -> InvalidRequest:
    return InvalidRequest(
        f"The zip is damaged: {name} cannot be read ({why}); nothing was imported.",
        details={"field": "body", "member": name},
    )


def _member_limit(name: str) -> int:
    return MANIFEST_MAX_BYTES if name == MANIFEST_NAME else MEMBER_MAX_BYTES


def _check_end_record(upload: IO[bytes]) -> int:
    """Counts and sizes the central directory from the end record, before zipfile reads
    it: a directory of millions of entries is refused unread."""
    upload.seek(0, os.SEEK_END)
    size = upload.tell()
    tail_size = min(size, END_RECORD_MAX)
    upload.seek(size - tail_size)
    tail = upload.read(tail_size)
    upload.seek(0)
    # Where zipfile finds it: the last 22 bytes when there is no comment, else the
    # last signature within the longest comment's reach.
    start = len(tail) - _END_RECORD.size
    if start < 0:
        raise InvalidRequest("The body is not a zip archive.")
    if not (tail[start : start + 4] == _END_SIGNATURE and tail[-2:] == b"\0\0"):
        start = tail.rfind(_END_SIGNATURE)
        if start < 0 or start + _END_RECORD.size > len(tail):
            raise InvalidRequest("The body is not a zip archive.")
    locator = start - _ZIP64_LOCATOR.size
    if size - tail_size + locator >= 0 and _zip64_locator_at(upload, size - tail_size + locator):
        # An export within an import's limits never needs zip64's counts and sizes.
        raise InvalidRequest(
            "The zip has zip64 end records; an export within an import's limits has none."
        )
    record = _END_RECORD.unpack_from(tail, start)
    entries, directory_bytes = record[4], record[5]
    # 0xFFFF and 0xFFFFFFFF mean the counts are in a zip64 record: far past any limit.
    if entries > members_max():
        raise ImportTooManyMembers(
            f"The zip has {entries} members; an import holds at most {documents_max()} "
            f"documents ({members_max()} members).",
            members=entries,
            max_members=members_max(),
        )
    directory_max = members_max() * CENTRAL_ENTRY_MAX
    if directory_bytes > directory_max:
        raise ImportLimitExceeded(
            f"The zip's central directory is {directory_bytes} bytes; an import's is at "
            f"most {directory_max}.",
            bytes=directory_bytes,
            max_bytes=directory_max,
        )
    return size


def _zip64_locator_at(upload: IO[bytes], offset: int) -> bool:
    upload.seek(offset)
    found = upload.read(4) == _ZIP64_LOCATOR_SIGNATURE
    upload.seek(0)
    return found


def _check_directory(infos: list[zipfile.ZipInfo], size: int) -> dict[str, list[str]]:
    """Every member is one an export writes, within its limits; the documents by resource.

    Members must not share their bytes: together with their local headers they fit in
    the archive (entries pointing at one deflate stream are a known bomb).
    """
    if len(infos) > members_max():
        raise ImportTooManyMembers(
            f"The zip has {len(infos)} members; an import holds at most {members_max()}.",
            members=len(infos),
            max_members=members_max(),
        )
    seen: set[str] = set()
    documents: dict[str, list[str]] = {}
    count = 0
    inflated = 0
    stored = 0
    for info in infos:
        name = info.orig_filename
        if name in seen:
            raise not_a_member(name, "appears twice")
        seen.add(name)
        _check_member(info)
        inflated += info.file_size
        stored += 30 + len(name) + info.compress_size
        if (match := _DOCUMENT_NAME.fullmatch(name)) is not None:
            documents.setdefault(match[1], []).append(match[2])
            count += 1
    if count > documents_max():
        raise ImportTooManyMembers(
            f"The zip has {count} documents; an import holds at most {documents_max()}.",
            members=count,
            max_members=documents_max(),
        )
    if stored > size:
        raise InvalidRequest(
            "The zip's members overlap (their data takes more bytes than the archive "
            "has); nothing was imported.",
            details={"field": "body"},
        )
    if inflated > inflated_max():
        raise ImportLimitExceeded(
            f"The zip's members inflate to {inflated} bytes; an import's at most {inflated_max()}.",
            bytes=inflated,
            max_bytes=inflated_max(),
        )
    return documents


def _check_member(info: zipfile.ZipInfo) -> None:
    name = info.orig_filename
    kind = stat.S_IFMT(info.external_attr >> 16)
    if _FOLDER_NAME.fullmatch(name) is not None:
        if info.file_size or kind not in (0, stat.S_IFDIR):
            raise not_a_member(name, "is a folder with contents of its own")
        return
    if name != MANIFEST_NAME and _DOCUMENT_NAME.fullmatch(name) is None:
        raise not_a_member(name, "is not manifest.json, <resource>/ or <resource>/<id>.json")
    if kind not in (0, stat.S_IFREG):
        raise not_a_member(name, "is a link or another special file")
    if info.flag_bits & (_ENCRYPTED | _UNSUPPORTED_FLAGS):
        raise not_a_member(name, "is encrypted")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise not_a_member(name, "is compressed with a method other than deflate")
    limit = _member_limit(name)
    if info.file_size > limit:
        raise ImportLimitExceeded(
            f"{name} inflates to {info.file_size} bytes; an exported "
            f"{'manifest' if name == MANIFEST_NAME else 'document'} is at most {limit}.",
            bytes=info.file_size,
            max_bytes=limit,
            member=name,
        )
    if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
        raise not_a_member(name, "is stored with two different sizes")
    if info.file_size > info.compress_size * DEFLATE_RATIO_MAX + DEFLATE_SLACK_BYTES:
        raise not_a_member(
            name,
            f"declares {info.file_size} bytes from {info.compress_size}, more than deflate "
            "can inflate",
        )
