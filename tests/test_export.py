"""The export module: what a snapshot holds, how it streams, its audit entry and its isolation."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memoryadmin.core.errors import InvalidRequest, NotFound
from memoryadmin.memory import export
from memoryadmin.memory.export import export_snapshot
from memoryadmin.memory.models import AuditEntry, Project, Resource
from memoryadmin.memory.representations import document_dict
from memoryadmin.memory.services.deployments import resource_get
from memoryadmin.memory.services.documents import (
    document_create,
    document_delete,
    document_get,
    document_replace,
)
from tests.helpers import is_postgres, retire_kb


def test_snapshot_exports_live_documents_of_every_resource_retired_included(
    project: Project, notes: Resource, make_document: Any
) -> None:
    kb = resource_get(project=project, environment="development", resource_id="kb")
    make_document("workshop", text="Node 22.", summary="Runtime.")
    make_document("agenda", text="Day one.")
    make_document("faq", resource=kb, text="short")
    gone = make_document("gone", text="secret")
    document_delete(resource=notes, doc_id="gone", expected_revision=gone.revision, actor="test")
    retire_kb(project)

    with export_snapshot(project=project, environment="development", actor="cli:ann") as snap:
        assert snap.resources == ["kb", "notes"]
        assert snap.count == 3
        exported = list(snap.documents())

    assert exported == [
        ("kb", document_dict(document_get(resource=kb, doc_id="faq"), max_bytes=64)),
        ("notes", document_dict(document_get(resource=notes, doc_id="agenda"), max_bytes=8192)),
        ("notes", document_dict(document_get(resource=notes, doc_id="workshop"), max_bytes=8192)),
    ]
    assert exported[2][1]["text"] == "Node 22."
    assert exported[2][1]["summary"] == "Runtime."


def test_snapshot_restricted_to_named_resources(project: Project, make_document: Any) -> None:
    kb = resource_get(project=project, environment="development", resource_id="kb")
    make_document("workshop")
    make_document("faq", resource=kb)
    with export_snapshot(
        project=project, environment="development", resource_ids=["notes", "notes"], actor="t"
    ) as snap:
        assert snap.resources == ["notes"]
        assert snap.count == 1
        assert [(r, d["id"]) for r, d in snap.documents()] == [("notes", "workshop")]


def test_snapshot_of_unknown_resource_is_not_found_and_not_audited(project: Project) -> None:
    with (
        pytest.raises(NotFound, match="nope"),
        export_snapshot(
            project=project, environment="development", resource_ids=["nope"], actor="t"
        ),
    ):
        pytest.fail("the block must not run")
    assert not AuditEntry.objects.filter(action="memory.export").exists()


def test_snapshot_rejects_an_unknown_environment(project: Project) -> None:
    with (
        pytest.raises(InvalidRequest),
        export_snapshot(project=project, environment="staging", actor="t"),
    ):
        pytest.fail("the block must not run")


def test_snapshot_sees_only_its_environment(project: Project, make_document: Any) -> None:
    make_document("workshop")
    with export_snapshot(project=project, environment="production", actor="t") as snap:
        assert snap.resources == []
        assert snap.count == 0
        assert list(snap.documents()) == []


def test_manifest_describes_the_export(project: Project, make_document: Any) -> None:
    make_document("workshop")
    with export_snapshot(project=project, environment="development", actor="t") as snap:
        manifest = snap.manifest()
    assert set(manifest) == {
        "format", "formatVersion", "project", "environment", "exportedAt",
        "resources", "documents", "consistentSnapshot",
    }  # fmt: skip
    assert manifest["format"] == "memoryadmin.export"
    assert manifest["formatVersion"] == 1
    assert manifest["project"] == "acme"
    assert manifest["environment"] == "development"
    assert manifest["resources"] == ["kb", "notes"]
    assert manifest["documents"] == 1
    assert manifest["consistentSnapshot"] is snap.consistent
    assert manifest["exportedAt"].endswith("Z")


def test_snapshot_records_one_audit_entry_with_the_actor(
    project: Project, make_document: Any
) -> None:
    make_document("workshop")
    with export_snapshot(
        project=project, environment="development", resource_ids=["notes"], actor="cli:ann"
    ) as snap:
        list(snap.documents())
    entry = AuditEntry.objects.get(action="memory.export")
    assert (entry.project_id, entry.environment, entry.actor) == ("acme", "development", "cli:ann")
    assert entry.detail == {
        "resources": ["notes"],
        "documents": 1,
        "consistentSnapshot": snap.consistent,
    }


def test_documents_are_read_in_bounded_chunks(
    project: Project, make_document: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export, "CHUNK_SIZE", 2)
    for index in range(5):
        make_document(f"doc-{index}")
    with (
        export_snapshot(
            project=project, environment="development", resource_ids=["notes"], actor="t"
        ) as snap,
        CaptureQueriesContext(connection) as queries,
    ):
        ids = [document["id"] for _, document in snap.documents()]
    assert ids == [f"doc-{index}" for index in range(5)]
    selects = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT")]
    assert len(selects) == 3
    assert all("LIMIT 2" in sql for sql in selects)


def test_reading_documents_after_the_block_is_refused(project: Project, make_document: Any) -> None:
    make_document("workshop")
    with export_snapshot(project=project, environment="development", actor="t") as snap:
        pass
    with pytest.raises(RuntimeError, match="closed"):
        list(snap.documents())


@pytest.mark.django_db(transaction=True)
def test_consistent_only_on_postgresql(project: Project) -> None:
    with export_snapshot(project=project, environment="development", actor="t") as snap:
        assert snap.consistent is is_postgres()
    assert AuditEntry.objects.get(action="memory.export").detail["consistentSnapshot"] is (
        is_postgres()
    )


@pytest.mark.django_db(transaction=True)
def test_audit_entry_survives_a_consumer_that_fails(project: Project, make_document: Any) -> None:
    make_document("workshop")

    def consume() -> None:
        with export_snapshot(project=project, environment="development", actor="t") as snap:
            next(snap.documents())
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        consume()
    assert AuditEntry.objects.filter(action="memory.export").count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_export_reads_one_snapshot_while_others_write(
    project: Project, notes: Resource, make_document: Any
) -> None:
    first = make_document("a-first", text="before")
    make_document("b-second", text="before")
    opened = threading.Barrier(2)
    written = threading.Barrier(2)
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            opened.wait()
            document_replace(
                resource=notes, doc_id="a-first", expected_revision=first.revision,
                text="after", actor="t",
            )  # fmt: skip
            second = document_get(resource=notes, doc_id="b-second")
            document_replace(
                resource=notes, doc_id="b-second", expected_revision=second.revision,
                text="after", actor="t",
            )  # fmt: skip
            document_create(resource=notes, doc_id="c-third", title="New", actor="t")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()
            written.wait()

    thread = threading.Thread(target=writer)
    thread.start()
    with export_snapshot(project=project, environment="development", actor="t") as snap:
        opened.wait()
        written.wait()
        exported = {document["id"]: document["text"] for _, document in snap.documents()}
        count = snap.count
    thread.join()

    assert errors == []
    assert snap.consistent is True
    assert exported == {"a-first": "before", "b-second": "before"}
    assert count == 2
    assert document_get(resource=notes, doc_id="a-first").text == "after"
