"""The export download: a streamed zip of <resource>/<id>.json files and a manifest."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from memoryadmin.memory.models import AuditEntry, Resource
from memoryadmin.memory.representations import document_dict
from tests.helpers import html_of, streamed

pytestmark = pytest.mark.django_db

EXPORT = "/projects/acme/development/export/"


@pytest.fixture
def documents(make_document: Any) -> None:
    kb = Resource.objects.get(resource_id="kb", environment="development")
    make_document("workshop", text="Node 22.\n", summary="Runtime.")
    make_document("unicode", title="Ünïcode", text="日本語 ✓")
    make_document("refunds", resource=kb, text="30 days.")
    deleted = make_document("gone", text="secret")
    from memoryadmin.memory.services.documents import document_delete

    document_delete(
        resource=deleted.resource, doc_id="gone", expected_revision=deleted.revision, actor="t"
    )


def download(client: Client, resources: list[str]) -> tuple[Any, zipfile.ZipFile]:
    response = client.post(EXPORT, {"resources": resources})
    assert response.status_code == 200
    body = streamed(response)
    return response, zipfile.ZipFile(io.BytesIO(body))


def test_export_page_offers_every_document_resource(
    web: Callable[[str], Client], documents: None
) -> None:
    html = html_of(web("owner").get(EXPORT))
    assert 'value="kb"' in html
    assert 'value="notes"' in html
    assert html.count("checked") == 2


def test_export_of_the_whole_environment_streams_every_live_document(
    web: Callable[[str], Client], documents: None
) -> None:
    response, archive = download(web("owner"), ["kb", "notes"])
    assert response.streaming is True
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"].startswith(
        'attachment; filename="memory-acme-development-'
    )
    files = sorted(n for n in archive.namelist() if not n.endswith("/"))
    assert files == [
        "kb/refunds.json",
        "manifest.json",
        "notes/unicode.json",
        "notes/workshop.json",
    ]
    notes = Resource.objects.get(resource_id="notes", environment="development")
    workshop = notes.documents.get(doc_id="workshop")
    assert json.loads(archive.read("notes/workshop.json")) == document_dict(
        workshop, max_bytes=8192
    )
    assert json.loads(archive.read("notes/unicode.json"))["text"] == "日本語 ✓"
    manifest = json.loads(archive.read("manifest.json"))
    assert manifest["project"] == "acme"
    assert manifest["environment"] == "development"
    assert manifest["resources"] == ["kb", "notes"]
    assert manifest["documents"] == 3
    entry = AuditEntry.objects.get(action="memory.export")
    assert entry.actor == "user:olivia"
    assert entry.detail["documents"] == 3


def test_export_of_chosen_resources_holds_only_those(
    web: Callable[[str], Client], documents: None
) -> None:
    _, archive = download(web("support"), ["kb"])
    assert sorted(archive.namelist()) == ["kb/", "kb/refunds.json", "manifest.json"]
    assert json.loads(archive.read("manifest.json"))["resources"] == ["kb"]
    assert AuditEntry.objects.get(action="memory.export").actor == "user:sam"


def test_export_needs_at_least_one_resource(web: Callable[[str], Client], documents: None) -> None:
    response = web("owner").post(EXPORT, {})
    assert response.status_code == 422
    assert "This field is required." in response.content.decode()
    assert not AuditEntry.objects.filter(action="memory.export").exists()


def test_export_of_an_unknown_resource_is_refused(
    web: Callable[[str], Client], documents: None
) -> None:
    response = web("owner").post(EXPORT, {"resources": ["nosuch"]})
    assert response.status_code == 422
    assert not AuditEntry.objects.filter(action="memory.export").exists()


def test_viewers_may_not_export(web: Callable[[str], Client], documents: None) -> None:
    response = web("viewer").post(EXPORT, {"resources": ["kb"]})
    assert response.status_code == 403
    assert not AuditEntry.objects.filter(action="memory.export").exists()


def test_export_page_counts_documents_and_selects_all_or_none(
    web: Callable[[str], Client], documents: None
) -> None:
    html = html_of(web("owner").get(EXPORT))
    # Box, then its label with the resource's live documents (the deleted one not counted).
    assert 'value="notes"' in html
    assert 'notes <span class="count" data-documents="2">2 documents</span></label>' in html
    assert 'kb <span class="count" data-documents="1">1 document</span></label>' in html
    assert "2 of 2 resources selected, 3 documents" in html
    none = html_of(web("owner").get(EXPORT, {"select": "none"}))
    assert none.count("checked") == 0
    assert "0 of 2 resources selected, 0 documents" in none
