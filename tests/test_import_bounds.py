"""Imports are bounded before anything is inflated: zip bombs, lying headers, members an
export never writes and oversized files are refused quickly and create nothing, while an
export of the largest allowed size still imports. Exports are bounded too: one download
per project at a time, each within its seconds."""

from __future__ import annotations

import io
import json
import os
import struct
import threading
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone
from rest_framework.test import APIClient

from memoryadmin.memory import imports
from memoryadmin.memory.export import FORMAT, FORMAT_VERSION, MANIFEST_NAME
from memoryadmin.memory.imports import TransferBusy, import_slot
from memoryadmin.memory.models import (
    AuditEntry,
    Document,
    DocumentVersion,
    ImportSlot,
    Project,
)
from memoryadmin.memory.services.deployments import (
    deployment_create,
    deployment_promote,
    resource_get,
)
from memoryadmin.memory.services.documents import document_create
from tests.helpers import (
    MANIFEST_MEMORY,
    Keys,
    clean_env,
    gunicorn,
    run_threads,
    stream_of,
    streamed,
    suite_database_url,
)

PROJECT = "/api/managed-agents/projects/acme"
IMPORT = f"{PROJECT}/memory/import"
EXPORT = f"{PROJECT}/memory/export"
MIB = 1024 * 1024
# A refusal is answered in well under a second; 5 s leaves room for a loaded machine.
REFUSED_WITHIN_SECONDS = 5.0


# Zips written byte by byte, so a test can give a member any header it likes.


@dataclass(frozen=True)
class Member:
    name: str
    data: bytes  # as stored (deflated, unless method is 0)
    size: int  # the uncompressed size the headers declare
    crc: int
    method: int = zipfile.ZIP_DEFLATED
    flags: int = 0
    external_attr: int = 0o644 << 16


def deflated(chunks: Iterator[bytes]) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return b"".join(compressor.compress(chunk) for chunk in chunks) + compressor.flush()


def member(name: str, content: bytes) -> Member:
    return Member(name, deflated(iter([content])), len(content), zlib.crc32(content))


def zeros_member(name: str, size: int) -> Member:
    """`size` zero bytes, deflated without ever holding them whole."""
    data = deflated(b"\0" * MIB for _ in range(size // MIB))
    return Member(name, data, size, _zeros_crc(size))


def _zeros_crc(size: int) -> int:
    crc = 0
    for _ in range(size // MIB):
        crc = zlib.crc32(b"\0" * MIB, crc)
    return crc


def raw_zip(members: list[Member]) -> bytes:
    out = bytearray()
    central = bytearray()
    for m in members:
        offset = len(out)
        name = m.name.encode()
        fields = (m.flags, m.method, 0, 0x21, m.crc, len(m.data), m.size, len(name))
        out += struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, *fields, 0) + name + m.data
        central += struct.pack(
            "<4s6H3L5H2L", b"PK\x01\x02", 20, 20, *fields, 0, 0, 0, 0, m.external_attr, offset
        )
        central += name
    count = len(members)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, count, count, len(central), len(out), 0)
    return bytes(out + central + end)


def manifest(documents: int, resources: list[str] | None = None) -> Member:
    data = {
        "format": FORMAT,
        "formatVersion": FORMAT_VERSION,
        "resources": resources or ["notes"],
        "documents": documents,
    }
    return member(MANIFEST_NAME, json.dumps(data).encode())


def document(doc_id: str, resource: str = "notes", **fields: Any) -> Member:
    body = {"id": doc_id, "title": doc_id.title(), **fields}
    return member(f"{resource}/{doc_id}.json", json.dumps(body).encode())


def nothing_created() -> None:
    assert not Document.objects.exists()
    assert not DocumentVersion.objects.exists()
    assert not AuditEntry.objects.filter(action__startswith="document.").exists()


# Bombs, through gunicorn as in production (its default limits).


@pytest.fixture(scope="module")
def server(django_db_setup: None, django_db_blocker: Any) -> Iterator[str]:
    with django_db_blocker.unblock():
        database = suite_database_url()
    env = clean_env(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DJANGO_SECRET_KEY=django_settings.SECRET_KEY,
        DATABASE_URL=database,
        DATABASE_POOL="0",
        GUNICORN_GRACEFUL_TIMEOUT="1",
    )
    with gunicorn(env, workers=1, threads=2) as base:
        yield base


def bombs() -> dict[str, Callable[[], tuple[bytes, int, str]]]:
    """name: what makes (zip, status, what the message says). Each is made when its test
    runs, not when the module is collected: collection runs in every xdist worker, and
    building all five took a second and a quarter of each worker's CPU."""

    # Declares 100 bytes (with their checksum) over a 64 MiB stream of zeros.
    def lying() -> Member:
        return Member(
            "notes/lie.json", zeros_member("x", 64 * MIB).data, 100, zlib.crc32(b"\0" * 100)
        )

    def copies(size: int, count: int) -> list[Member]:
        zeros = zeros_member("notes/z.json", size)
        return [Member(f"notes/z{i}.json", zeros.data, zeros.size, zeros.crc) for i in range(count)]

    return {
        # The attack as reported: ~11 MB of 1 MiB members of zeros.
        "ten-thousand-mib-members": lambda: (
            raw_zip([manifest(10_000), *copies(MIB, 10_000)]),
            413,
            "The zip has 10001 members; an import holds at most 5000 documents",
        ),
        "a-thousand-mib-members": lambda: (
            raw_zip([manifest(1000), *copies(MIB, 1000)]),
            413,
            f"notes/z0.json inflates to {MIB} bytes; an exported document is at most",
        ),
        "forty-mib-members": lambda: (
            raw_zip([manifest(3), *copies(40 * MIB, 3)]),
            413,
            f"notes/z0.json inflates to {40 * MIB} bytes; an exported document is at most",
        ),
        "lying-header": lambda: (
            raw_zip([manifest(2), document("fine"), lying()]),
            400,
            "'notes/lie.json' inflates past its declared 100 bytes",
        ),
        "many-tiny-members": lambda: (
            raw_zip(
                [manifest(60_000)] + [member(f"notes/t{i}.json", b"{}") for i in range(60_000)]
            ),
            413,
            "The zip has 60001 members",
        ),
    }


BOMBS = bombs()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", list(BOMBS))
def test_a_zip_bomb_is_refused_within_seconds_and_creates_nothing(
    server: str, keys: Keys, notes: Any, name: str
) -> None:
    body, status, fragment = BOMBS[name]()
    started = time.monotonic()
    response = httpx.post(
        f"{server}{IMPORT}?environment=development",
        content=body,
        headers={"x-api-key": keys.owner, "Content-Type": "application/zip"},
        timeout=REFUSED_WITHIN_SECONDS,
    )
    assert time.monotonic() - started < REFUSED_WITHIN_SECONDS
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == ("memory_limit_exceeded" if status == 413 else "invalid_request")
    assert error["details"]["field"] == "body"
    assert fragment in error["message"]
    nothing_created()


def test_the_limits_derive_from_the_document_limits() -> None:
    # Title, text and summary at their limits, every byte a control character; frozen,
    # so its file also says what an unfreeze returns it to.
    largest = {
        "id": "d" * 128,
        "title": "\x01" * 240,
        "text": "\x01" * 16_384,
        "summary": "\x01" * 240,
        "agentWrites": "disabled",
        "revision": "r" * 64,
        "bytes": 16_384,
        "maxBytes": 16_384,
        "updatedAt": "2026-01-01T00:00:00.000Z",
        "writer": {"kind": "agent", "sessionId": "s" * 64},
        "agentWritesUnfrozen": "review",
    }
    written = json.dumps(largest, ensure_ascii=False, indent=2) + "\n"
    assert len(written.encode()) <= imports.MEMBER_MAX_BYTES
    # Every document at that size, stored uncompressed, fits the upload limit.
    name = f"{'r' * 128}/{'d' * 128}.json"
    stored = imports.documents_max() * (len(written) + 2 * (30 + 46 + len(name)) + 16)
    assert stored + imports.MANIFEST_MAX_BYTES <= imports.upload_max()


# The largest export the limits allow still imports (a small maximum, so it runs fast).


@pytest.fixture
def big_resources(project: Project) -> None:
    declarations = [
        {"id": "big", "description": "Big.", "provider": {"kind": "document", "maxBytes": 16_384}}
    ]
    for environment in ("development", "production"):
        deployment = deployment_create(
            project=project, agent="support-bot", memory=declarations, actor="t"
        )
        deployment_promote(deployment=deployment, environment=environment, actor="t")


def test_an_export_of_the_largest_allowed_size_imports(
    api: APIClient, project: Project, big_resources: None, settings: Any
) -> None:
    settings.MEMORYADMIN_IMPORT_DOCUMENTS_MAX = 12
    resource = resource_get(project=project, environment="development", resource_id="big")
    for i in range(12):
        document_create(
            resource=resource,
            doc_id=f"{'d' * 126}{i:02d}",
            title="\x01" * 240,
            text="\x01" * 16_384,
            summary="\x01" * 240,
            actor="t",
        )
    exported = api.post(f"{EXPORT}?environment=development&resource=big")
    body = streamed(exported)
    archive = zipfile.ZipFile(io.BytesIO(body))
    sizes = [i.file_size for i in archive.infolist() if i.filename.endswith(".json")]
    documents = [s for s in sizes if s > 1000]
    assert len(documents) == 12
    assert max(documents) > 0.95 * imports.MEMBER_MAX_BYTES
    response = api.post(f"{IMPORT}?environment=production", data=body,
                        content_type="application/zip")  # fmt: skip
    assert response.status_code == 200, response.content
    assert response.json()["created"] == 12
    assert Document.objects.filter(resource__environment="production").count() == 12


def test_one_document_over_the_maximum_is_refused_whole(
    api: APIClient, notes: Any, settings: Any
) -> None:
    settings.MEMORYADMIN_IMPORT_DOCUMENTS_MAX = 3
    body = raw_zip([manifest(4)] + [document(f"d{i}") for i in range(4)])
    response = api.post(f"{IMPORT}?environment=development", data=body,
                        content_type="application/zip")  # fmt: skip
    assert response.status_code == 413, response.content
    assert response.json()["error"]["details"] == {"field": "body", "members": 4, "maxMembers": 3}
    nothing_created()


# Members an export never writes.


LINK = (0o120777 << 16) | 0


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (member("../notes/evil.json", b"{}"), "is not manifest.json"),
        (member("/etc/evil.json", b"{}"), "is not manifest.json"),
        (member("notes/../../evil.json", b"{}"), "is not manifest.json"),
        (member("notes/sub/evil.json", b"{}"), "is not manifest.json"),
        (member("notes\\evil.json", b"{}"), "is not manifest.json"),
        (member("notes/evil.txt", b"{}"), "is not manifest.json"),
        (document("other", resource="kb"), "a resource the manifest does not name"),
        (
            Member(
                "notes/link.json",
                b"/etc/passwd",
                11,
                zlib.crc32(b"/etc/passwd"),
                method=zipfile.ZIP_STORED,
                external_attr=LINK,
            ),
            "is a link",
        ),
        (
            Member("notes/enc.json", b"xx", 2, 0, method=zipfile.ZIP_STORED, flags=1),
            "is encrypted",
        ),
        (
            Member("notes/bz.json", b"BZh9", 4, 0, method=zipfile.ZIP_BZIP2),
            "a method other than deflate",
        ),
        (document("fine"), "appears twice"),
    ],
    ids=[
        "dot-dot",
        "absolute",
        "inner-dot-dot",
        "nested",
        "backslash",
        "not-json",
        "unnamed-resource",
        "symlink",
        "encrypted",
        "bzip2",
        "duplicate",
    ],
)
def test_a_member_an_export_never_writes_refuses_the_zip(
    api: APIClient, notes: Any, extra: Member, fragment: str
) -> None:
    body = raw_zip([manifest(2), document("fine"), extra])
    response = api.post(f"{IMPORT}?environment=development", data=body,
                        content_type="application/zip")  # fmt: skip
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert (error["code"], error["details"]["field"]) == ("invalid_request", "body")
    assert fragment in error["message"]
    nothing_created()


def test_a_member_shorter_than_its_header_is_refused(api: APIClient, notes: Any) -> None:
    real = document("short")
    lying = Member(real.name, real.data, real.size + 10, real.crc)
    response = api.post(f"{IMPORT}?environment=development",
                        data=raw_zip([manifest(2), document("fine"), lying]),
                        content_type="application/zip")  # fmt: skip
    assert response.status_code == 400, response.content
    assert "where its header says" in response.json()["error"]["message"]
    nothing_created()


# The manifest counts the documents an export holds: an archive or directory with more or
# fewer is incomplete or altered, refused whole.


@pytest.mark.parametrize("held", [9, 11])
def test_a_zip_holding_other_than_its_manifest_s_count_is_refused(
    api: APIClient, notes: Any, held: int
) -> None:
    body = raw_zip([manifest(10)] + [document(f"d{i}") for i in range(held)])
    for dry_run in ("", "&dryRun=true"):
        response = api.post(f"{IMPORT}?environment=development{dry_run}", data=body,
                            content_type="application/zip")  # fmt: skip
        assert response.status_code == 400, response.content
        error = response.json()["error"]
        assert error["code"] == "invalid_request"
        assert error["details"] == {"field": "body", "manifestDocuments": 10, "documents": held}
        assert error["message"] == (
            f"The export's manifest.json counts 10 documents but the export holds {held}: "
            "it is incomplete or altered, so nothing was imported."
        )
    nothing_created()
    assert not AuditEntry.objects.filter(project_id="acme", action__startswith="document.").exists()


def test_a_zip_whose_manifest_counts_no_documents_is_refused(api: APIClient, notes: Any) -> None:
    data = {"format": FORMAT, "formatVersion": FORMAT_VERSION, "resources": ["notes"]}
    for count in ({}, {"documents": "1"}, {"documents": -1}, {"documents": True}):
        shown = member(MANIFEST_NAME, json.dumps({**data, **count}).encode())
        response = api.post(f"{IMPORT}?environment=development",
                            data=raw_zip([shown, document("fine")]),
                            content_type="application/zip")  # fmt: skip
        assert response.status_code == 400, response.content
        assert "manifest.json has no count of documents" in response.json()["error"]["message"]
    nothing_created()


@pytest.mark.parametrize("held", [9, 11])
def test_a_directory_holding_other_than_its_manifest_s_count_is_refused(
    project: Project, notes: Any, tmp_path: Path, held: int
) -> None:
    (tmp_path / "notes").mkdir()
    data = {"format": FORMAT, "formatVersion": FORMAT_VERSION, "resources": ["notes"]}
    (tmp_path / MANIFEST_NAME).write_text(json.dumps({**data, "documents": 10}))
    for i in range(held):
        (tmp_path / "notes" / f"d{i}.json").write_text(json.dumps({"id": f"d{i}", "title": "T"}))
    with pytest.raises(CommandError) as raised:
        call_command("memory", "--project", "acme", "import", "--from", str(tmp_path),
                     stdout=io.StringIO())  # fmt: skip
    assert raised.value.returncode == 6  # invalid input
    assert str(raised.value) == (
        f"The export's manifest.json counts 10 documents but the export holds {held}: "
        "it is incomplete or altered, so nothing was imported."
    )
    nothing_created()


# The wall-clock bound: past it, everything the import did is rolled back.


def test_an_import_past_its_deadline_creates_nothing(
    api: APIClient, notes: Any, settings: Any
) -> None:
    settings.MEMORYADMIN_IMPORT_SECONDS = 0.2
    body = raw_zip([manifest(1500)] + [document(f"d{i}", text="x" * 100) for i in range(1500)])
    response = api.post(f"{IMPORT}?environment=development", data=body,
                        content_type="application/zip")  # fmt: skip
    assert response.status_code == 413, response.content
    error = response.json()["error"]
    assert error["details"] == {"field": "body", "maxSeconds": 0.2}
    assert "did not finish within 0.2 seconds" in error["message"]
    nothing_created()


# One import per project at a time; other projects go on.


def test_a_project_imports_one_zip_at_a_time_and_other_projects_go_on(
    client_for: Any, keys: Keys, project: Project, other_project: Project
) -> None:
    deployment = deployment_create(
        project=other_project, agent="bot", memory=MANIFEST_MEMORY, actor="t"
    )
    deployment_promote(deployment=deployment, environment="development", actor="t")
    body = raw_zip([manifest(1), document("fine")])
    other = "/api/managed-agents/projects/globex/memory/import?environment=development"
    with import_slot(project.id):  # an import of acme in flight
        busy = client_for(keys.owner).post(f"{IMPORT}?environment=development", data=body,
                                           content_type="application/zip")  # fmt: skip
        elsewhere = client_for(keys.other).post(other, data=body, content_type="application/zip")
    assert busy.status_code == 429, busy.content
    assert busy["Retry-After"] == "5"
    assert busy.json()["error"]["details"] == {"reason": "import_in_progress", "retryAfter": 5}
    assert elsewhere.status_code == 200, elsewhere.content
    assert not Document.objects.filter(resource__project=project).exists()
    # The slot is free again once the import is over, refused or not.
    again = client_for(keys.owner).post(f"{IMPORT}?environment=development", data=body,
                                        content_type="application/zip")  # fmt: skip
    assert again.status_code == 200, again.content
    assert again.json()["created"] == 1


@pytest.mark.django_db(transaction=True)
def test_the_import_slot_holds_across_processes_without_a_shared_cache(
    server: str, keys: Keys, project: Project, notes: Any
) -> None:
    """The server is another process, with no REDIS_URL: the slot this process holds is
    the one it sees, and it is free there once given back here."""
    body = raw_zip([manifest(1), document("fine")])

    def post() -> httpx.Response:
        return httpx.post(
            f"{server}{IMPORT}?environment=development",
            content=body,
            headers={"x-api-key": keys.owner, "Content-Type": "application/zip"},
            timeout=30,
        )

    with import_slot(project.id):  # an import of acme in flight, in this process
        busy = post()
        assert busy.status_code == 429, busy.text
        assert ImportSlot.objects.filter(project=project).count() == 1
    assert busy.headers["Retry-After"] == "5"
    assert busy.json()["error"]["details"] == {"reason": "import_in_progress", "retryAfter": 5}
    nothing_created()
    assert not ImportSlot.objects.exists()  # given back
    again = post()
    assert again.status_code == 200, again.text
    assert again.json()["created"] == 1
    assert not ImportSlot.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_an_import_slot_left_by_a_dead_process_frees_at_its_time(
    project: Project, notes: Any
) -> None:
    ImportSlot.objects.create(
        project=project, token="dead", until=timezone.now() - timedelta(seconds=1)
    )
    with import_slot(project.id):
        slot = ImportSlot.objects.get(project=project)
        assert slot.token != "dead"
        assert slot.until > timezone.now()
    assert not ImportSlot.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_an_import_slot_expires_by_the_databases_clock_not_the_hosts(
    project: Project, notes: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host whose clock is an hour ahead neither takes a slot still held nor writes one
    that lasts an hour less: the slot's expiry is the database's time."""
    with import_slot(project.id):
        held = ImportSlot.objects.get(project=project)
        ahead = timezone.now() + timedelta(hours=1)
        monkeypatch.setattr(timezone, "now", lambda: ahead)
        with pytest.raises(TransferBusy), import_slot(project.id):
            pass
        monkeypatch.undo()
        assert ImportSlot.objects.get(project=project).token == held.token
    ahead = timezone.now() + timedelta(hours=1)
    monkeypatch.setattr(timezone, "now", lambda: ahead)
    with import_slot(project.id):
        monkeypatch.undo()
        slot = ImportSlot.objects.get(project=project)
        assert timezone.now() < slot.until < timezone.now() + timedelta(minutes=30)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_imports_at_once_on_two_server_processes_run_one_at_a_time(
    keys: Keys, project: Project, notes: Any
) -> None:
    """Two gunicorn processes on PostgreSQL without REDIS_URL, four imports of one zip
    released together, two on each, all reaching the slot while the first runs (it
    creates 400 documents): one runs, the other three are 429, on either process."""
    count = 400
    body = raw_zip(
        [manifest(count)] + [document(f"d{i:03d}", text="y" * 2000) for i in range(count)]
    )
    env = clean_env(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DJANGO_SECRET_KEY=django_settings.SECRET_KEY,
        DATABASE_URL=suite_database_url(),
        DATABASE_POOL="0",
        GUNICORN_GRACEFUL_TIMEOUT="1",
    )
    with gunicorn(env, workers=1, threads=4) as one, gunicorn(env, workers=1, threads=4) as two:

        def run_import(index: int) -> tuple[int, dict[str, Any]]:
            response = httpx.post(
                f"{(one, two)[index % 2]}{IMPORT}?environment=development",
                content=body,
                headers={"x-api-key": keys.owner, "Content-Type": "application/zip"},
                timeout=120,
            )
            return response.status_code, response.json()

        results = run_threads(4, run_import)
    statuses = sorted(status for status, _ in results)
    assert statuses == [200, 429, 429, 429], results
    assert [body["created"] for status, body in results if status == 200] == [count]
    assert Document.objects.filter(resource=notes).count() == count
    assert not ImportSlot.objects.exists()


# Export downloads: one per project at a time (page and API), each within its seconds.


def _exported(response: Any) -> zipfile.ZipFile:
    assert response.status_code == 200, response.content
    return zipfile.ZipFile(io.BytesIO(streamed(response)))


def test_a_project_downloads_one_export_at_a_time_and_other_projects_go_on(
    client_for: Any, keys: Keys, project: Project, other_project: Project, people: Any,
    web_client_for: Any, notes: Any,
) -> None:  # fmt: skip
    document_create(resource=notes, doc_id="kept", title="Kept", text="x", actor="t")
    deployment = deployment_create(
        project=other_project, agent="bot", memory=MANIFEST_MEMORY, actor="t"
    )
    deployment_promote(deployment=deployment, environment="development", actor="t")
    owner = client_for(keys.owner)
    first = owner.post(f"{EXPORT}?environment=development")  # streaming, not read yet
    assert first.status_code == 200
    busy = owner.post(f"{EXPORT}?environment=development")
    assert busy.status_code == 429, busy.content
    assert busy["Retry-After"] == "5"
    assert busy.json()["error"] == {
        "code": "rate_limited",
        "message": "This project is exporting already; one export runs at a time.",
        "details": {"reason": "export_in_progress", "retryAfter": 5},
    }
    # The page's download is the same slot; another project's is not.
    page = web_client_for(people.owner).post(
        "/projects/acme/development/export/", {"resources": ["kb", "notes"]}
    )
    assert page.status_code == 429
    assert "one export runs at a time" in page.content.decode()
    elsewhere = client_for(keys.other).post(
        "/api/managed-agents/projects/globex/memory/export?environment=development"
    )
    assert MANIFEST_NAME in _exported(elsewhere).namelist()
    # Read to its end, the first is whole, and the slot is free again.
    assert "notes/kept.json" in _exported(first).namelist()
    again = owner.post(f"{EXPORT}?environment=development")
    assert MANIFEST_NAME in _exported(again).namelist()
    assert AuditEntry.objects.filter(action="memory.export").count() == 3


@pytest.mark.parametrize("read", [0, 1], ids=["before-its-first-byte", "part-way"])
def test_a_download_its_client_leaves_gives_its_slot_back(read: int) -> None:
    """The server closes every response, read to its end or not (a client gone)."""
    from memoryadmin.memory.exportzip import Download, download_slot

    ended: list[str] = []

    def stream() -> Iterator[bytes]:
        try:
            yield b"first"
            yield b"second"
        finally:
            ended.append("the snapshot closed")

    busy = TransferBusy("exporting", "export", "export_in_progress")
    download = Download(stream(), download_slot("memory-export", "acme", busy), "export")
    with pytest.raises(TransferBusy):
        download_slot("memory-export", "acme", busy)
    assert [chunk for _, chunk in zip(range(read), download, strict=False)] == [b"first"][:read]
    download.close()
    download.close()
    assert ended == ["the snapshot closed"][:read]
    download_slot("memory-export", "acme", busy).give()


def test_an_export_its_client_leaves_part_way_stays_audited(
    client_for: Any, keys: Keys, notes: Any
) -> None:
    """Some documents may have left: the export's audit entry stays (on PostgreSQL it is
    written in the export's snapshot, a transaction that a client gone closed part-way
    rolled back)."""
    for n in range(3):
        document_create(resource=notes, doc_id=f"d{n}", title="D", text="x", actor="t")
    response = client_for(keys.owner).post(f"{EXPORT}?environment=development")
    assert response.status_code == 200
    content = response._iterator  # the test client's, which closes the response at its end
    assert next(content)
    content.close()  # as the server closes the response of a client gone
    entry = AuditEntry.objects.get(action="memory.export")
    assert entry.detail["documents"] == 3


def test_a_download_keeps_its_slot_while_it_streams(monkeypatch: Any) -> None:
    """Its slot lasts a minute unless the stream goes on, so a process that dies mid-way
    frees it soon, and one that streams longer keeps it."""
    from memoryadmin.memory import exportzip

    monkeypatch.setattr(exportzip, "SLOT_SECONDS", 1)
    monkeypatch.setattr(exportzip, "SLOT_KEPT_EVERY", 0.2)
    busy = TransferBusy("exporting", "export", "export_in_progress")

    def slow() -> Iterator[bytes]:
        for _ in range(8):
            time.sleep(0.25)
            yield b"chunk"

    download = exportzip.Download(slow(), exportzip.download_slot("x", "acme", busy), "export")
    assert list(download) == [b"chunk"] * 8  # two seconds, twice the slot's own
    with pytest.raises(TransferBusy):
        exportzip.download_slot("x", "acme", busy)
    download.close()
    exportzip.download_slot("x", "acme", busy).give()


def test_a_download_stops_before_a_chunk_made_past_its_seconds_and_never_after_its_last(
    settings: Any,
) -> None:
    from memoryadmin.memory.exportzip import Download, DownloadTimedOut, download_slot

    settings.MEMORYADMIN_EXPORT_SECONDS = 0.3
    busy = TransferBusy("exporting", "export", "export_in_progress")

    def late() -> Iterator[bytes]:
        yield b"first"
        time.sleep(0.5)
        yield b"manifest"

    sent: list[bytes | str] = []
    download = Download(late(), download_slot("x", "acme", busy), "export")
    with pytest.raises(DownloadTimedOut):
        sent.extend(download)
    download.close()
    assert sent == [b"first"]
    # Its last chunk sent within its seconds, a download is whole, however long the
    # client then takes.
    download = Download(iter([b"first", b"manifest"]), download_slot("x", "acme", busy), "e")
    for chunk in download:
        sent.append(chunk)
        time.sleep(0.2)
    download.close()
    assert sent == [b"first", b"first", b"manifest"]


def test_an_export_past_its_seconds_stops_before_its_manifest(
    client_for: Any, keys: Keys, notes: Any, settings: Any, monkeypatch: Any
) -> None:
    from memoryadmin.memory import exportzip

    for n in range(3):
        document_create(resource=notes, doc_id=f"d{n}", title="D", text="x", actor="t")
    settings.MEMORYADMIN_EXPORT_SECONDS = 0.5
    files = exportzip.export_file

    def slow_file(document: Any) -> bytes:
        if document.get("id") == "d1":
            time.sleep(0.7)  # the export's seconds pass while it is made
        return files(document)

    monkeypatch.setattr(exportzip, "export_file", slow_file)
    owner = client_for(keys.owner)
    response = owner.post(f"{EXPORT}?environment=development")
    assert response.status_code == 200
    chunks: list[bytes] = []
    with pytest.raises(exportzip.DownloadTimedOut):
        chunks.extend(stream_of(response))
    assert b"".join(chunks)  # what left before the deadline
    assert b"d1.json" not in b"".join(chunks)
    assert MANIFEST_NAME.encode() not in b"".join(chunks)  # never a complete-looking zip
    # It is audited as begun, and the project may export again at once.
    assert AuditEntry.objects.filter(action="memory.export").count() == 1
    monkeypatch.setattr(exportzip, "export_file", files)
    whole = _exported(owner.post(f"{EXPORT}?environment=development"))
    assert sorted(n for n in whole.namelist() if n.startswith("notes/d")) == [
        "notes/d0.json",
        "notes/d1.json",
        "notes/d2.json",
    ]


# The CLI's directory import: each file is read only when it is a regular file within
# the member limit; anything else fails that file.


def test_the_cli_import_reads_no_huge_file_and_follows_no_link(
    project: Project, notes: Any, tmp_path: Path
) -> None:
    (tmp_path / "notes").mkdir()
    data = {
        "format": FORMAT,
        "formatVersion": FORMAT_VERSION,
        "resources": ["notes"],
        "documents": 4,
    }
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data))
    (tmp_path / "notes" / "fine.json").write_text(json.dumps({"id": "fine", "title": "Fine"}))
    with (tmp_path / "notes" / "huge.json").open("wb") as huge:
        huge.truncate(8 * 1024 * MIB)  # sparse: 8 GiB that take no disk
    outside = tmp_path / "secret.json"
    outside.write_text(json.dumps({"id": "leak", "title": "Leak"}))
    os.symlink(outside, tmp_path / "notes" / "leak.json")
    os.symlink("/dev/zero", tmp_path / "notes" / "zero.json")
    out = io.StringIO()
    started = time.monotonic()
    with pytest.raises(CommandError, match="3 documents could not be imported"):
        call_command("memory", "--project", "acme", "import", "--from", str(tmp_path),
                     stdout=out)  # fmt: skip
    assert time.monotonic() - started < REFUSED_WITHIN_SECONDS
    lines = out.getvalue().splitlines()
    too_big = f"huge.json is over {imports.MEMBER_MAX_BYTES} bytes: not an exported document"
    assert f"failed notes/huge: {too_big}" in lines
    assert "failed notes/leak: leak.json is a link, not an exported file" in lines
    assert "failed notes/zero: zero.json is a link, not an exported file" in lines
    assert list(Document.objects.values_list("doc_id", flat=True)) == ["fine"]


@contextmanager
def fifo_nobody_writes(path: Path) -> Iterator[None]:
    """A FIFO at `path` that no one writes: a reader that opened it waiting for a writer
    is let go (an empty read) once REFUSED_WITHIN_SECONDS have passed, so a test of a
    reader that should not wait fails instead of hanging."""
    os.mkfifo(path)
    done = threading.Event()

    def let_go() -> None:
        if done.wait(REFUSED_WITHIN_SECONDS):
            return
        while not done.is_set():
            with suppress(OSError):  # opens only while a reader waits on it
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            time.sleep(0.05)

    thread = threading.Thread(target=let_go, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def test_the_cli_import_fails_a_folder_or_fifo_under_an_exported_name_and_goes_on(
    project: Project, notes: Any, tmp_path: Path
) -> None:
    (tmp_path / "notes").mkdir()
    data = {
        "format": FORMAT,
        "formatVersion": FORMAT_VERSION,
        "resources": ["notes"],
        "documents": 3,
    }
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data))
    (tmp_path / "notes" / "a-folder.json").mkdir()
    (tmp_path / "notes" / "c-fine.json").write_text(json.dumps({"id": "c-fine", "title": "F"}))
    out = io.StringIO()
    started = time.monotonic()
    with (
        fifo_nobody_writes(tmp_path / "notes" / "b-fifo.json"),
        pytest.raises(CommandError, match="2 documents could not be imported"),
    ):
        call_command("memory", "--project", "acme", "import", "--from", str(tmp_path),
                     stdout=out)  # fmt: skip
    assert time.monotonic() - started < REFUSED_WITHIN_SECONDS
    lines = out.getvalue().splitlines()
    assert "failed notes/a-folder: a-folder.json is not a regular file" in lines
    assert "failed notes/b-fifo: b-fifo.json is not a regular file" in lines
    assert list(Document.objects.values_list("doc_id", flat=True)) == ["c-fine"]


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_manifest_that_is_no_regular_file_is_no_export(
    project: Project, notes: Any, tmp_path: Path, kind: str
) -> None:
    manifest = tmp_path / MANIFEST_NAME
    if kind == "folder":
        manifest.mkdir()
    started = time.monotonic()
    with (
        fifo_nobody_writes(manifest) if kind == "fifo" else nullcontext(),
        pytest.raises(CommandError, match=r"manifest\.json is not a regular file"),
    ):
        call_command("memory", "--project", "acme", "import", "--from", str(tmp_path),
                     stdout=io.StringIO())  # fmt: skip
    assert time.monotonic() - started < REFUSED_WITHIN_SECONDS
    assert not Document.objects.exists()
