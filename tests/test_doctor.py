"""`manage.py doctor`: rows an earlier version stored with NUL or unpaired surrogates (possible
on SQLite) are found, reported and, with --fix, repaired and audited, so every list reads again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from memoryadmin.agents.models import Session
from memoryadmin.agents.services.sessions import session_create
from memoryadmin.memory.models import AuditEntry, Deployment, Document, DocumentVersion, Project
from tests.helpers import DEV, People, is_postgres

pytestmark = pytest.mark.django_db

API = "/api/managed-agents"
PAGE = "/projects/acme/development"


def doctor(*args: str) -> str:
    out = StringIO()
    call_command("doctor", *args, stdout=out)
    return out.getvalue()


def test_a_clean_database_is_reported_clean(project: Project, make_document: Any) -> None:
    make_document("d1", text="plain 😀 text")
    assert doctor() == "Every stored string keeps the rule.\n"
    assert doctor("--fix") == "Every stored string keeps the rule.\n"
    assert not AuditEntry.objects.filter(action="doctor.repair").exists()


@pytest.fixture
def poisoned(project: Project, make_document: Any) -> dict[str, Any]:
    """Rows as an earlier version could leave them on SQLite, written with raw SQL."""
    if is_postgres():
        pytest.skip("PostgreSQL cannot store NUL or unpaired surrogates")
    document = make_document("d1", text="before")
    session, _ = session_create(
        project=project,
        agent_id="support-bot@development",
        labels={"u": "ok"},
        idempotency_key="k1",
        actor="test",
    )
    deployment = Deployment.objects.get(project=project)
    memory = json.dumps(deployment.memory).replace("Product knowledge.", "Product\\ud800")
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Session._meta.db_table} SET labels = %s WHERE id = %s",
            ['{"u": "\\ud800", "k\\udfff": "v"}', session.id],
        )
        cursor.execute(
            f"UPDATE {Deployment._meta.db_table} SET memory = %s WHERE id = %s",
            [memory, deployment.id],
        )
        cursor.execute(
            f"UPDATE {Document._meta.db_table} SET text = %s, title = %s WHERE id = %s",
            ["a\x00b", "T\x00", document.pk],
        )
        cursor.execute(
            f"UPDATE {DocumentVersion._meta.db_table} SET text = %s WHERE document_id = %s",
            ["a\x00b", document.pk],
        )
    return {"session": session, "deployment": deployment, "document": document}


def test_poisoned_rows_are_found_reported_and_repaired(
    poisoned: dict[str, Any],
    client_for: Callable[[str | None], APIClient],
    keys: Any,
    people: People,
    web_client_for: Callable[[Any], Client],
) -> None:
    api = client_for(keys.owner)
    api.raise_request_exception = False
    page = web_client_for(people.owner)
    page.raise_request_exception = False
    session = poisoned["session"]
    reads = [
        (api, f"{API}/sessions{DEV}"),
        (api, f"{API}/sessions/{session.id}"),
        (api, f"{API}/projects/acme/deployments"),
        (page, f"{PAGE}/sessions/{session.id}/"),
    ]
    # What the poison did: lists that include those rows cannot be read.
    assert [client.get(url).status_code for client, url in reads] == [500] * 4

    with pytest.raises(CommandError) as raised:
        doctor()
    assert raised.value.returncode == 1
    assert "4 row(s) hold NUL or unpaired surrogates" in str(raised.value)

    report = doctor("--fix")
    document = poisoned["document"]
    version = DocumentVersion.objects.get(document=document)
    assert f"agents.Session {session.id}: labels\n" in report
    assert f"memory.Deployment {poisoned['deployment'].id}: memory\n" in report
    assert f"memory.Document {document.pk}: title, text\n" in report
    assert f"memory.DocumentVersion {version.pk}: text\n" in report
    assert "Repaired 4 row(s)." in report

    assert [client.get(url).status_code for client, url in reads] == [200] * 4
    session.refresh_from_db()
    assert session.labels == {"u": "\ufffd", "k\ufffd": "v"}
    document.refresh_from_db()
    assert (document.title, document.text, document.bytes) == ("T\ufffd", "a\ufffdb", 5)
    assert document.revision == poisoned["document"].revision
    version.refresh_from_db()
    assert (version.text, version.bytes) == ("a\ufffdb", 5)
    repairs = AuditEntry.objects.filter(action="doctor.repair").order_by("id")
    assert sorted((e.detail["model"], e.project_id, e.environment) for e in repairs) == [
        ("agents.Session", "acme", "development"),
        ("memory.Deployment", "acme", ""),
        ("memory.Document", "acme", "development"),
        ("memory.DocumentVersion", "acme", "development"),
    ]
    assert {e.detail["id"] for e in repairs} >= {session.id, str(document.pk)}
    assert all(e.actor.startswith("cli:") for e in repairs)
    assert doctor() == "Every stored string keeps the rule.\n"


def test_a_repaired_row_of_no_project_is_audited_without_one(project: Project) -> None:
    """A key of every project and a job belong to no project: their repairs are in the log
    all the same (before, a job's was left out, and a key of every project's failed)."""
    if is_postgres():
        pytest.skip("PostgreSQL cannot store NUL or unpaired surrogates")
    from django.utils import timezone

    from memoryadmin.memory.models import ApiKey
    from memoryadmin.memory.services.keys import api_key_create
    from memoryadmin.runner.models import Job

    key, _ = api_key_create(project_id=None, name="everywhere")
    job = Job.objects.create(name="x", run_after=timezone.now())
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {ApiKey._meta.db_table} SET name = %s WHERE id = %s", ["e\x00", key.pk]
        )
        cursor.execute(
            f"UPDATE {Job._meta.db_table} SET last_error = %s WHERE id = %s", ["b\x00", job.pk]
        )

    report = doctor("--fix")

    assert "Repaired 2 row(s)." in report
    repairs = AuditEntry.objects.filter(action="doctor.repair")
    assert sorted(
        (e.detail["model"], e.detail["id"], e.project_id, e.environment) for e in repairs
    ) == [
        ("memory.ApiKey", str(key.pk), None, ""),
        ("runner.Job", str(job.pk), None, ""),
    ]
    assert all(e.actor.startswith("cli:") for e in repairs)
    key.refresh_from_db()
    job.refresh_from_db()
    assert (key.name, job.last_error) == ("e\ufffd", "b\ufffd")
    assert doctor() == "Every stored string keeps the rule.\n"
