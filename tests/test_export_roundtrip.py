"""An export imported into an empty environment of another project gives every document
back: its title, summary and text exactly (every character an export may hold, at the
limits), its write mode, and, for a frozen document, the mode an unfreeze returns to;
through the CLI's directory and the API's zip alike."""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from memoryadmin.memory.models import Document, Resource
from memoryadmin.memory.services.deployments import deployment_create, resource_get
from memoryadmin.memory.services.documents import (
    document_create,
    document_delete,
    document_set_agent_writes,
)
from memoryadmin.memory.services.keys import api_key_create
from memoryadmin.memory.services.projects import project_create
from tests.helpers import run_threads, streamed

API = "/api/managed-agents/projects"
MEMORY = [
    {"id": "notes", "description": "n", "provider": {"kind": "document", "maxBytes": 16384}},
    {
        "id": "reviewed",
        "description": "r",
        "provider": {"kind": "document", "maxBytes": 16384, "agentWrites": "review"},
    },
]
# Characters outside the BMP, noncharacters, a byte order mark, line and paragraph
# separators, a combining mark, controls JSON escapes, quotes and backslashes, CRLF.
EDGE = '\U0010ffff\uffff\ufffe\ufeff\u2028\u2029e\u0301\u00e9\x01\x1f\x7f\r\n\r\\"/\U0001f600'
# Fields compared: the text and what an export carries of the write mode.
FIELDS = ("doc_id", "title", "summary", "text", "bytes", "agent_writes", "agent_review")


def _environment(project_id: str, environment: str) -> dict[str, Resource]:
    project = project_create(project_id=project_id, actor="test")
    deployment_create(project=project, agent="bot", memory=MEMORY, promote=environment, actor="t")
    return {
        r: resource_get(project=project, environment=environment, resource_id=r)
        for r in ("notes", "reviewed")
    }


@pytest.fixture
def source(db: None) -> dict[str, Resource]:
    resources = _environment("source", "development")
    notes, reviewed = resources["notes"], resources["reviewed"]

    def make(resource: Resource, doc_id: str, **fields: Any) -> None:
        fields.setdefault("title", doc_id)
        document_create(resource=resource, doc_id=doc_id, actor="t", **fields)

    make(notes, "crlf", text="one\r\ntwo\r\n\r\n", summary="")
    make(notes, "edge", title=EDGE, summary=EDGE, text=EDGE * 20)
    make(notes, "full", text="x" * 16384)
    make(notes, "full-multibyte", text="\u00e9" * 8192)
    make(notes, "full-escaped", title="\x01" * 240, summary="\x1f" * 240, text="\x01" * 16384)
    make(notes, "long-title", title="\u20ac" * 80, summary="\U0001f600" * 60)
    make(notes, "Case", text="upper")
    make(notes, "case", text="lower")
    make(notes, "frozen", agent_writes=False)
    make(notes, "review", agent_review=True)
    make(notes, "frozen-review", agent_writes=False, agent_review=True)
    make(reviewed, "frozen-enabled", agent_writes=False, agent_review=False)
    make(reviewed, "frozen-inherit", agent_writes=False)
    make(notes, "gone")
    document_delete(
        resource=notes,
        doc_id="gone",
        expected_revision=Document.objects.get(doc_id="gone").revision,
        actor="t",
    )
    return resources


def _documents(resources: dict[str, Resource]) -> dict[tuple[str, str], tuple[Any, ...]]:
    return {
        (resource_id, row[0]): row
        for resource_id, resource in resources.items()
        for row in Document.objects.live().filter(resource=resource).values_list(*FIELDS)
    }


def _mode_after_unfreeze(resources: dict[str, Resource]) -> dict[tuple[str, str], str]:
    """What each frozen document's agent writes are once it is unfrozen."""
    modes = {}
    for resource_id, resource in resources.items():
        for document in Document.objects.live().filter(resource=resource, agent_writes=False):
            document_set_agent_writes(
                resource=resource, doc_id=document.doc_id, enabled=True, actor="t"
            )
            document.refresh_from_db()
            review = resource.review_default if document.agent_review is None else (
                document.agent_review
            )  # fmt: skip
            modes[(resource_id, document.doc_id)] = "review" if review else "enabled"
    return modes


def _expected(source: dict[str, Resource]) -> dict[tuple[str, str], tuple[Any, ...]]:
    """The source's documents as an import makes them: the mode each showed, kept as the
    document's own (a frozen one's: the mode its unfreeze returns to)."""
    expected = {}
    for key, row in _documents(source).items():
        *fields, agent_writes, agent_review = row
        review = source[key[0]].review_default if agent_review is None else agent_review
        expected[key] = (*fields, agent_writes, review)
    return expected


def _check_round_trip(source: dict[str, Resource], target: dict[str, Resource]) -> None:
    imported = _documents(target)
    assert imported == _expected(source)
    assert ("notes", "gone") not in imported  # deleted documents are not exported
    assert (
        _mode_after_unfreeze(target)
        == _mode_after_unfreeze(source)
        == {
            ("notes", "frozen"): "enabled",
            ("notes", "frozen-review"): "review",
            ("reviewed", "frozen-enabled"): "enabled",
            ("reviewed", "frozen-inherit"): "review",
        }
    )


@pytest.mark.django_db(transaction=True)
def test_a_cli_export_imports_back_exactly_and_again_changes_nothing(
    source: dict[str, Resource], tmp_path: Path
) -> None:
    target = _environment("target", "production")
    call_command("memory", "--project", "source", "export", "--out", str(tmp_path / "m"),
                 stdout=StringIO())  # fmt: skip

    def run_import() -> str:
        out = StringIO()
        call_command("memory", "--project", "target", "--environment", "production",
                     "import", "--from", str(tmp_path / "m"), stdout=out)  # fmt: skip
        return out.getvalue().splitlines()[-1]

    assert run_import() == (
        "Imported 13 documents into target/production; skipped 0 (0 existing, 0 deleted "
        "ids, 0 in missing resources); 0 failed."
    )
    before = _documents(target)
    assert run_import().startswith("Imported 0 documents into target/production; skipped 13 ")
    assert _documents(target) == before
    _check_round_trip(source, target)


@pytest.mark.django_db(transaction=True)
def test_an_api_export_imports_back_exactly_and_again_changes_nothing(
    source: dict[str, Resource],
) -> None:
    target = _environment("target", "production")
    reader, writer = APIClient(), APIClient()
    reader.credentials(HTTP_X_API_KEY=api_key_create(project_id="source")[1])
    writer.credentials(HTTP_X_API_KEY=api_key_create(project_id="target")[1])
    response = reader.post(f"{API}/source/memory/export?environment=development")
    assert response.status_code == 200
    archive = streamed(response)
    url = f"{API}/target/memory/import?environment=production"

    first = writer.post(url, data=archive, content_type="application/zip")
    assert first.status_code == 200, first.content
    assert (first.json()["created"], first.json()["skipped"], first.json()["failed"]) == (13, 0, 0)
    before = _documents(target)
    again = writer.post(url, data=archive, content_type="application/zip")
    assert again.status_code == 200, again.content
    assert (again.json()["created"], again.json()["skipped"]) == (0, 13)
    assert {d["reason"] for d in again.json()["documents"]} == {"exists"}
    assert _documents(target) == before
    _check_round_trip(source, target)


@pytest.mark.django_db(transaction=True)
def test_a_frozen_document_s_unfreeze_mode_is_enabled_or_review(
    source: dict[str, Resource], tmp_path: Path
) -> None:
    target = _environment("target", "production")
    call_command("memory", "--project", "source", "export", "--out", str(tmp_path / "m"),
                 "--resource", "notes", stdout=StringIO())  # fmt: skip
    frozen = tmp_path / "m" / "notes" / "frozen-review.json"
    assert '"agentWritesUnfrozen": "review"' in frozen.read_text()
    assert "agentWritesUnfrozen" not in (tmp_path / "m" / "notes" / "review.json").read_text()
    frozen.write_text(frozen.read_text().replace('"review"', '"disabled"'))
    out = StringIO()
    with pytest.raises(CommandError, match="1 document could not be imported"):
        call_command("memory", "--project", "target", "--environment", "production",
                     "import", "--from", str(tmp_path / "m"), stdout=out)  # fmt: skip
    assert "failed notes/frozen-review: agentWritesUnfrozen must be 'enabled' or 'review'." in (
        out.getvalue()
    )
    assert not Document.objects.filter(resource=target["notes"], doc_id="frozen-review").exists()
    assert Document.objects.filter(resource=target["notes"]).count() == 10


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_four_imports_of_one_export_at_once_create_each_document_once(
    source: dict[str, Resource], live_server: Any
) -> None:
    """Over real HTTP: the project's import slot lets one import run at a time; the others
    are 429 (or, once it ended, find every id taken), and no document is created twice."""
    for i in range(300):
        document_create(
            resource=source["notes"], doc_id=f"n{i:03d}", title="t", text="y" * 2000, actor="t"
        )
    target = _environment("target", "production")
    reader = api_key_create(project_id="source")[1]
    writer = api_key_create(project_id="target")[1]
    with httpx.Client(timeout=60) as client:
        archive = client.post(
            f"{live_server.url}{API}/source/memory/export?environment=development",
            headers={"x-api-key": reader},
        ).content

    def run_import(index: int) -> tuple[int, dict[str, Any]]:
        with httpx.Client(timeout=120) as client:
            response = client.post(
                f"{live_server.url}{API}/target/memory/import?environment=production",
                headers={"x-api-key": writer, "Content-Type": "application/zip"},
                content=archive,
            )
        return response.status_code, response.json()

    results = run_threads(4, run_import)
    statuses = sorted(status for status, _ in results)
    assert 200 in statuses, statuses
    assert 429 in statuses, statuses  # released together: the others came while it ran
    assert set(statuses) <= {200, 429}, statuses
    # One import at a time: each that ran created all or none, never a share of them.
    created = [body["created"] for status, body in results if status == 200]
    assert sorted(created)[-1] == 313, created
    assert set(created) <= {0, 313}, created
    for status, body in results:
        if status == 429:
            assert body["error"]["details"] == {"reason": "import_in_progress", "retryAfter": 5}
    assert Document.objects.filter(resource__project_id="target").count() == 313
    _check_round_trip(source, target)
