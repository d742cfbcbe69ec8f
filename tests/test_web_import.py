"""Import on the Memory page: upload an export zip, see its dry run (created, conflicts,
skipped, failed: the API import rolled back), confirm. Bounded as the API's upload; the
same rules, by the same code; owners only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from rest_framework.test import APIClient

from memoryadmin.memory.models import AuditEntry, Document, Resource
from memoryadmin.web.services import imports as page_imports
from tests.helpers import html_of, streamed

URL = "/projects/acme/development/import/"
API = "/api/managed-agents/projects/acme/memory"


@pytest.fixture(autouse=True)
def var_dir(settings: Any, tmp_path: Path) -> Path:
    settings.VAR_DIR = tmp_path
    return tmp_path


@pytest.fixture
def export_zip(api: APIClient, make_document: Any, notes: Resource) -> bytes:
    """An export of development: notes/a, notes/b and kb/c (imported back into it, a and b
    are conflicts: their ids exist)."""
    make_document("a", text="first")
    make_document("b", text="second")
    kb = Resource.objects.get(resource_id="kb", environment="development")
    make_document("c", resource=kb, text="third")
    response = api.post(f"{API}/export?environment=development")
    assert response.status_code == 200
    return streamed(response)


def upload(client: Client, content: bytes, name: str = "memory.zip") -> Any:
    return client.post(URL, {"export": SimpleUploadedFile(name, content, "application/zip")})


def token_of(html: str) -> str:
    marker = 'name="upload" value="'
    return html.split(marker, 1)[1].split('"', 1)[0]


def test_a_dry_run_reports_and_changes_nothing_then_the_import_creates(
    owner: Client, export_zip: bytes, var_dir: Path
) -> None:
    # c is gone here (a fresh environment would have none): it is what an import creates.
    Document.objects.filter(doc_id="c").delete()
    audit_before = AuditEntry.objects.count()
    html = html_of(upload(owner, export_zip))
    assert "Importing memory.zip would create 1 document" in html
    assert '<strong data-count="created">1</strong>' in html
    assert '<strong data-count="conflicts">2</strong>' in html  # a and b exist here
    assert not Document.objects.filter(doc_id="c").exists()
    assert AuditEntry.objects.count() == audit_before
    assert len(list((var_dir / "imports" / "acme" / "development").glob("*.zip"))) == 1

    done = owner.post(URL, {"upload": token_of(html), "confirm": "yes"}, follow=True)
    assert "Imported: 1 created, 2 conflicts and 0 others skipped, 0 failed." in html_of(done)
    assert Document.objects.get(doc_id="c").text == "third"
    assert AuditEntry.objects.filter(action="document.create", actor="user:olivia").count() == 1
    # The upload is gone: confirming twice imports nothing more.
    assert list((var_dir / "imports" / "acme" / "development").glob("*.zip")) == []
    again = owner.post(URL, {"upload": token_of(html), "confirm": "yes"})
    assert "no longer waiting" in html_of(again, 404)


def test_the_page_reports_what_the_api_reports(
    owner: Client, api: APIClient, export_zip: bytes
) -> None:
    Document.objects.filter(doc_id="c").delete()
    dry = api.post(
        f"{API}/import?environment=development&dryRun=true",
        export_zip,
        content_type="application/zip",
    ).json()
    assert dry["dryRun"] is True
    assert (dry["created"], dry["skipped"], dry["failed"]) == (1, 2, 0)
    assert not Document.objects.filter(doc_id="c").exists()
    html = html_of(upload(owner, export_zip))
    for row in dry["documents"]:
        assert f"<code>{row['id']}</code>" in html
    bad = api.post(
        f"{API}/import?environment=development&dryRun=yes",
        export_zip,
        content_type="application/zip",
    )
    assert bad.status_code == 400


def test_a_zip_that_is_not_an_export_is_refused_and_nothing_waits(
    owner: Client, var_dir: Path, notes: Resource
) -> None:
    response = upload(owner, b"not a zip at all")
    assert response.status_code == 400
    assert "zip" in response.content.decode()


def test_a_refused_upload_keeps_nothing_and_leaves_the_waiting_one_confirmable(
    owner: Client, export_zip: bytes, var_dir: Path
) -> None:
    """A zip the dry run refuses was kept anyway (no token shown, so never importable)
    and had deleted the upload waiting for its confirmation, in another tab."""
    Document.objects.filter(doc_id="c").delete()
    waiting = token_of(html_of(upload(owner, export_zip)))
    folder = var_dir / "imports" / "acme" / "development"
    assert [p.name for p in folder.glob("*.zip")] == [f"{waiting}.zip"]

    refused = upload(owner, b"not a zip at all")
    assert refused.status_code == 400
    assert "not a zip archive" in refused.content.decode()
    assert [p.name for p in folder.glob("*.zip")] == [f"{waiting}.zip"]

    done = owner.post(URL, {"upload": waiting, "confirm": "yes"}, follow=True)
    assert "Imported: 1 created" in html_of(done)
    assert Document.objects.get(doc_id="c").text == "third"
    assert list(folder.glob("*.zip")) == []


def test_the_upload_is_bounded_like_the_api_s(
    owner: Client, export_zip: bytes, var_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(page_imports, "upload_max", lambda: 1000)
    response = upload(owner, export_zip + b"\0" * 2000)
    html = html_of(response, 413)
    assert "over 1000 bytes" in html
    assert not (var_dir / "imports").exists()


def test_support_and_viewers_may_not_import(web: Any, export_zip: bytes) -> None:
    for persona in ("support", "viewer"):
        client = web(persona)
        assert client.get(URL).status_code == 403
        assert upload(client, export_zip).status_code == 403


def test_the_upload_needs_the_csrf_token(people: Any, export_zip: bytes) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(people.owner)
    response = upload(client, export_zip)
    assert response.status_code == 403


def test_the_export_page_links_it_for_owners_only(owner: Client, support: Client) -> None:
    assert URL in html_of(owner.get("/projects/acme/development/export/"))
    assert URL not in html_of(support.get("/projects/acme/development/export/"))
