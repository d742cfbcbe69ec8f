"""What the page and CLI could do, through the API: restore a version, the audit log,
export and import."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from memoryadmin.memory.models import AuditEntry, Document, DocumentVersion, Project, Resource
from memoryadmin.memory.services.deployments import deployment_create, deployment_promote
from memoryadmin.memory.services.documents import document_delete, document_replace
from tests.helpers import DEV, DOCS, MANIFEST_MEMORY, Keys, streamed

pytestmark = pytest.mark.django_db

PROJECT = "/api/managed-agents/projects/acme"
AUDIT = f"{PROJECT}/audit"
EXPORT = f"{PROJECT}/memory/export"
IMPORT = f"{PROJECT}/memory/import"


def restore_url(doc_id: str, revision: str) -> str:
    return f"{DOCS}/{doc_id}/versions/{revision}/restore{DEV}"


@pytest.fixture
def edited(make_document: Callable[..., Any], notes: Resource) -> tuple[Document, str]:
    """A document at its second version; returns it and its first revision."""
    first = make_document("workshop", text="Node 22.", summary="Runtime.")
    second = document_replace(
        resource=notes,
        doc_id="workshop",
        expected_revision=first.revision,
        text="Node 24.",
        summary="Newer.",
        actor="t",
    )
    return second, first.revision


# Restore


def test_restore_makes_the_old_version_current_as_a_new_version(
    api: APIClient, edited: tuple[Document, str]
) -> None:
    current, old = edited
    response = api.post(restore_url("workshop", old), HTTP_IF_MATCH=f'"{current.revision}"')
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["text"], body["summary"]) == ("Node 22.", "Runtime.")
    assert body["revision"] not in (old, current.revision)
    assert response["ETag"] == f'"{body["revision"]}"'
    stored = Document.objects.get(doc_id="workshop")
    assert (stored.text, stored.revision) == ("Node 22.", body["revision"])
    newest = DocumentVersion.objects.filter(document=stored).order_by("-id").first()
    assert newest is not None
    assert (newest.action, newest.revision) == ("restore", body["revision"])
    assert AuditEntry.objects.filter(action="document.restore", revision=body["revision"]).exists()


def test_restore_with_a_stale_revision_is_412_and_changes_nothing(
    api: APIClient, edited: tuple[Document, str]
) -> None:
    current, old = edited
    response = api.post(restore_url("workshop", old), HTTP_IF_MATCH=f'"{old}"')
    assert response.status_code == 412
    assert response.json()["error"]["code"] == "precondition_failed"
    assert Document.objects.get(doc_id="workshop").revision == current.revision
    assert DocumentVersion.objects.count() == 2


def test_restore_needs_if_match(api: APIClient, edited: tuple[Document, str]) -> None:
    response = api.post(restore_url("workshop", edited[1]))
    assert response.status_code == 428
    assert response.json()["error"]["code"] == "precondition_required"


def test_restore_of_an_unknown_version_is_404(api: APIClient, edited: tuple[Document, str]) -> None:
    current = edited[0]
    response = api.post(restore_url("workshop", "f" * 20), HTTP_IF_MATCH=f'"{current.revision}"')
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert Document.objects.get(doc_id="workshop").revision == current.revision


def test_restore_needs_a_read_write_key_of_the_project(
    client_for: Callable[[str | None], APIClient], keys: Keys, edited: tuple[Document, str]
) -> None:
    current, old = edited
    for key, status in [(keys.read_only, 403), (keys.other, 403), (None, 401)]:
        response = client_for(key).post(
            restore_url("workshop", old), HTTP_IF_MATCH=f'"{current.revision}"'
        )
        assert response.status_code == status
    assert Document.objects.get(doc_id="workshop").revision == current.revision


def test_restore_of_a_deleted_document_is_404(api: APIClient, edited: tuple[Document, str]) -> None:
    current, old = edited
    document_delete(
        resource=current.resource, doc_id="workshop", expected_revision=current.revision, actor="t"
    )
    response = api.post(restore_url("workshop", old), HTTP_IF_MATCH=f'"{current.revision}"')
    assert response.status_code == 404


# Audit log


def test_audit_lists_newest_first_with_every_field(
    api: APIClient, edited: tuple[Document, str]
) -> None:
    response = api.get(f"{AUDIT}{DEV}&resource=notes&document=workshop")
    assert response.status_code == 200
    body = response.json()
    assert [e["action"] for e in body["entries"]] == ["document.replace", "document.create"]
    first = body["entries"][0]
    assert (first["resource"], first["document"]) == ("notes", "workshop")
    assert first["revision"] == edited[0].revision
    assert (first["actor"], first["environment"]) == ("t", "development")
    assert first["detail"] == {"bytes": 8}
    assert body["nextCursor"] is None


def test_audit_filters_by_actor_action_and_time(
    api: APIClient, edited: tuple[Document, str]
) -> None:
    created = AuditEntry.objects.get(action="document.create")
    replaced = AuditEntry.objects.get(action="document.replace")
    AuditEntry.objects.filter(pk=created.pk).update(created_at="2026-01-01T00:00:00Z")
    AuditEntry.objects.filter(pk=replaced.pk).update(created_at="2026-02-01T00:00:00Z")
    AuditEntry.objects.filter(pk=replaced.pk).update(actor="key:mak_x")

    def actions(query: str) -> list[str]:
        response = api.get(f"{AUDIT}{DEV}&resource=notes{query}")
        assert response.status_code == 200, response.content
        return [e["action"] for e in response.json()["entries"]]

    assert actions("&actor=key:mak_x") == ["document.replace"]
    assert actions("&action=document.create") == ["document.create"]
    assert actions("&since=2026-01-15T00:00:00Z") == ["document.replace"]
    assert actions("&until=2026-02-01T00:00:00Z") == ["document.create"]
    assert actions("&since=2026-01-01T00:00:00%2B00:00&until=2026-01-02") == ["document.create"]


def test_audit_pages_with_a_cursor_bound_to_its_filter(api: APIClient, notes: Resource) -> None:
    for n in range(55):
        AuditEntry.objects.create(
            project_id="acme", environment="development", actor="cli:pager", action=f"a.{n}"
        )
    first = api.get(f"{AUDIT}{DEV}&actor=pager").json()
    assert len(first["entries"]) == 50
    assert first["entries"][0]["action"] == "a.54"
    second = api.get(f"{AUDIT}{DEV}&actor=pager&cursor={first['nextCursor']}").json()
    assert [e["action"] for e in second["entries"]] == [f"a.{n}" for n in range(4, -1, -1)]
    assert second["nextCursor"] is None
    foreign = api.get(f"{AUDIT}{DEV}&actor=u&cursor={first['nextCursor']}")
    assert foreign.status_code == 400


@pytest.mark.parametrize(
    "query",
    ["since=yesterday", "until=2026-13-01", "resource=Not_A_Resource", "document=a%20b", "actor="],
)
def test_audit_refuses_bad_filters(api: APIClient, project: Project, query: str) -> None:
    response = api.get(f"{AUDIT}{DEV}&{query}")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


def test_audit_is_readable_with_a_read_key_and_only_in_its_project(
    client_for: Callable[[str | None], APIClient], keys: Keys, project: Project
) -> None:
    assert client_for(keys.read_only).get(f"{AUDIT}{DEV}").status_code == 200
    assert client_for(keys.other).get(f"{AUDIT}{DEV}").status_code == 403
    assert client_for(keys.owner).get(AUDIT).status_code == 400


# Export and import


@pytest.fixture
def documents(make_document: Callable[..., Any], notes: Resource) -> None:
    kb = Resource.objects.get(resource_id="kb", environment="development")
    make_document("workshop", text="Node 22.\n", summary="Runtime.")
    make_document("unicode", title="Ünïcode", text="日本語 ✓")
    make_document("refunds", resource=kb, text="30 days.")
    gone = make_document("gone", text="secret")
    document_delete(resource=notes, doc_id="gone", expected_revision=gone.revision, actor="t")


def export(api: APIClient, query: str = "") -> zipfile.ZipFile:
    response = api.post(f"{EXPORT}{DEV}{query}")
    assert response.status_code == 200, response
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"].startswith('attachment; filename="memory-acme-dev')
    return zipfile.ZipFile(io.BytesIO(streamed(response)))


def test_export_streams_the_page_zip_of_every_live_document(
    api: APIClient, documents: None
) -> None:
    archive = export(api)
    names = sorted(n for n in archive.namelist() if not n.endswith("/"))
    assert names == [
        "kb/refunds.json",
        "manifest.json",
        "notes/unicode.json",
        "notes/workshop.json",
    ]
    manifest = json.loads(archive.read("manifest.json"))
    assert (manifest["documents"], manifest["resources"]) == (3, ["kb", "notes"])
    assert json.loads(archive.read("notes/unicode.json"))["text"] == "日本語 ✓"
    entry = AuditEntry.objects.get(action="memory.export")
    assert entry.actor.startswith("key:mak_")
    assert entry.detail["documents"] == 3


def test_export_of_chosen_resources(api: APIClient, documents: None) -> None:
    archive = export(api, "&resource=kb")
    assert json.loads(archive.read("manifest.json"))["resources"] == ["kb"]
    assert "notes/workshop.json" not in archive.namelist()


def test_export_of_an_unknown_resource_is_404_before_anything_streams(
    api: APIClient, documents: None
) -> None:
    response = api.post(f"{EXPORT}{DEV}&resource=nope")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert not AuditEntry.objects.filter(action="memory.export").exists()
    assert api.post(f"{EXPORT}{DEV}&resource=Bad_Id").status_code == 400


def test_export_with_a_read_key_but_not_of_another_project(
    client_for: Callable[[str | None], APIClient], keys: Keys, documents: None
) -> None:
    assert client_for(keys.read_only).post(f"{EXPORT}{DEV}").status_code == 200
    assert client_for(keys.other).post(f"{EXPORT}{DEV}").status_code == 403


def zip_body(archive: zipfile.ZipFile) -> bytes:
    """The same members, stored uncompressed (so a test can find and damage a text)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as copy:
        for name in archive.namelist():
            copy.writestr(name, archive.read(name))
    return buffer.getvalue()


def upload(api: APIClient, body: bytes, environment: str = "development") -> Any:
    return api.post(
        f"{IMPORT}?environment={environment}", data=body, content_type="application/zip"
    )


def test_import_into_another_environment_creates_every_document(
    api: APIClient, project: Project, documents: None
) -> None:
    body = zip_body(export(api))
    deployment = deployment_create(
        project=project, agent="support-bot", memory=MANIFEST_MEMORY, actor="t"
    )
    deployment_promote(deployment=deployment, environment="production", actor="t")
    response = upload(api, body, "production")
    assert response.status_code == 200, response.content
    report = response.json()
    assert (report["created"], report["skipped"], report["failed"]) == (3, 0, 0)
    assert {(d["resource"], d["id"], d["status"]) for d in report["documents"]} == {
        ("kb", "refunds", "created"),
        ("notes", "unicode", "created"),
        ("notes", "workshop", "created"),
    }
    copy = Document.objects.get(resource__environment="production", doc_id="unicode")
    assert (copy.title, copy.text) == ("Ünïcode", "日本語 ✓")


def test_import_never_overwrites_and_reports_each_id(
    api: APIClient, notes: Resource, documents: None
) -> None:
    archive = export(api)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as changed:
        for info in archive.infolist():
            data = archive.read(info)
            if info.filename == "manifest.json":  # counts the three documents added
                manifest = json.loads(data)
                data = json.dumps({**manifest, "documents": manifest["documents"] + 3}).encode()
            changed.writestr(info, data)
        gone = {"id": "gone", "title": "Back", "text": "again"}
        changed.writestr("notes/gone.json", json.dumps(gone))
        changed.writestr("notes/fresh.json", json.dumps({"id": "fresh", "title": "Fresh"}))
        changed.writestr(
            "notes/huge.json", json.dumps({"id": "huge", "title": "H", "text": "x" * 9000})
        )
    before = Document.objects.get(doc_id="workshop").revision
    report = upload(api, buffer.getvalue()).json()
    by_id = {d["id"]: (d["status"], d["reason"]) for d in report["documents"]}
    assert by_id == {
        "refunds": ("skipped", "exists"),
        "unicode": ("skipped", "exists"),
        "workshop": ("skipped", "exists"),
        "gone": ("skipped", "deleted"),
        "fresh": ("created", None),
        "huge": ("failed", "invalid"),
    }
    assert (report["created"], report["skipped"], report["failed"]) == (1, 4, 1)
    assert Document.objects.get(doc_id="workshop").revision == before
    assert Document.objects.get(doc_id="gone").deleted
    assert not Document.objects.filter(doc_id="huge").exists()


def test_import_into_an_environment_without_the_resources_skips_each_id(
    api: APIClient, documents: None
) -> None:
    report = upload(api, zip_body(export(api)), "production").json()
    assert (report["created"], report["skipped"]) == (0, 3)
    assert {d["reason"] for d in report["documents"]} == {"missing-resource"}
    assert not Document.objects.filter(resource__environment="production").exists()


@pytest.mark.parametrize(
    "body",
    [b"not a zip", b"", "no manifest"],
)
def test_import_of_something_else_is_400_and_creates_nothing(
    api: APIClient, notes: Resource, body: Any
) -> None:
    if body == "no manifest":
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("notes/x.json", json.dumps({"id": "x", "title": "X"}))
        body = buffer.getvalue()
    response = upload(api, body)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid_request"
    assert not Document.objects.exists()


def test_import_of_a_damaged_zip_creates_nothing(api: APIClient, documents: None) -> None:
    body = bytearray(zip_body(export(api)))
    Document.objects.all().delete()
    marker = body.find(b"30 days.")
    assert marker > 0
    body[marker] = ord("4")
    response = upload(api, bytes(body))
    assert response.status_code == 400
    assert not Document.objects.exists()


def test_import_needs_a_zip_and_a_read_write_key(
    client_for: Callable[[str | None], APIClient], keys: Keys, documents: None
) -> None:
    body = zip_body(export(client_for(keys.owner)))
    assert upload(client_for(keys.read_only), body).status_code == 403
    assert upload(client_for(keys.other), body).status_code == 403
    response = client_for(keys.owner).post(
        f"{IMPORT}{DEV}", data=b"{}", content_type="application/json"
    )
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"
