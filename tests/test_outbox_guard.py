"""The outbox's guard (PostgreSQL, where a change, its audit entry and its deliveries are one
statement): a project whose last change written by this process queued no delivery has
its next one written under the condition that still no endpoint wants it, instead of
the delivery clauses. What the process remembers must never cost a delivery: an
endpoint registered elsewhere (another process, which cannot tell this one) hears of
the next change all the same."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryadmin.core.errors import PreconditionFailed
from memoryadmin.memory.models import AuditEntry, Document, DocumentVersion, Project, Resource
from memoryadmin.memory.services.audit import AuditFacts, audit_record
from memoryadmin.memory.services.documents import document_replace
from memoryadmin.runner.models import Job
from memoryadmin.webhooks.models import Delivery, Endpoint
from memoryadmin.webhooks.outbox import events_column_value, outbox_forget, outbox_guard
from tests.helpers import is_postgres

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not is_postgres(), reason="the one-statement replace of PostgreSQL"),
]


@pytest.fixture(autouse=True)
def forgotten(project: Project, other_project: Project) -> None:
    """Whatever earlier tests in this process taught it about these projects."""
    outbox_forget(project.id)
    outbox_forget(other_project.id)


@pytest.fixture
def workshop(make_document: Any) -> Document:
    document: Document = make_document("workshop", text="Node 22.")
    return document


def replace(document: Document, text: str, action: str = "replace") -> tuple[Any, list[str]]:
    """Replaces the document's text under its stored revision; the new document (or the
    error) and the statements that wrote (or tried to)."""
    stored = Document.objects.get(pk=document.pk)
    with CaptureQueriesContext(connection) as captured:
        try:
            result: Any = document_replace(
                resource=stored.resource,
                doc_id=stored.doc_id,
                expected_revision=stored.revision,
                text=text,
                actor="test",
                action=action,
            )
        except PreconditionFailed as exc:
            result = exc
    return result, [q["sql"] for q in captured.captured_queries if q["sql"].startswith("WITH")]


def guarded(sql: str) -> bool:
    return "NOT EXISTS" in sql and "webhooks_delivery" not in sql and "runner_job" not in sql


def with_clauses(sql: str) -> bool:
    return "NOT EXISTS" not in sql and "webhooks_delivery" in sql and "runner_job" in sql


def registered_elsewhere(project: Project, events: list[str], *, active: bool = True) -> Endpoint:
    """An endpoint made and committed on another connection, as another process makes
    one: this process hears nothing of it."""
    made: list[Endpoint] = []

    def make() -> None:
        try:
            made.append(
                Endpoint.objects.create(
                    project=project,
                    url="https://hooks.example/in",
                    events=events_column_value(events),
                    secret="s",
                    active=active,
                    created_at=timezone.now(),
                )
            )
        finally:
            connections.close_all()

    thread = threading.Thread(target=make)
    thread.start()
    thread.join(timeout=30)
    assert made, "the endpoint was not made"
    return made[0]


def test_a_change_no_endpoint_wanted_makes_the_next_one_guarded(workshop: Document) -> None:
    first, statements = replace(workshop, "Node 24.")
    assert [with_clauses(sql) for sql in statements] == [True]
    second, statements = replace(workshop, "Node 26.")
    assert [guarded(sql) for sql in statements] == [True]
    # Written, and recorded, as the one with the clauses was.
    stored = Document.objects.get(pk=workshop.pk)
    assert (stored.text, stored.revision) == ("Node 26.", second.revision)
    versions = DocumentVersion.objects.filter(document=stored, action="replace")
    assert sorted(versions.values_list("revision", flat=True)) == sorted(
        [first.revision, second.revision]
    )
    entries = AuditEntry.objects.filter(action="document.replace", document_id="workshop")
    assert sorted(entries.values_list("revision", flat=True)) == sorted(
        [first.revision, second.revision]
    )
    assert not Delivery.objects.exists()
    assert not Job.objects.exists()


def test_an_endpoint_registered_elsewhere_hears_the_next_change(
    workshop: Document, project: Project
) -> None:
    replace(workshop, "Node 24.")  # nothing wanted it: the next one is guarded
    endpoint = registered_elsewhere(project, ["document.updated"])
    document, statements = replace(workshop, "Node 26.")
    # The guard failed (an endpoint wants the change), so nothing was written by it,
    # and the change was written again with the clauses.
    assert [guarded(statements[0]), with_clauses(statements[1])] == [True, True]
    assert len(statements) == 2
    delivery = Delivery.objects.get()
    assert (delivery.endpoint_id, delivery.event) == (endpoint.pk, "document.updated")
    assert f'"revision":"{document.revision}"' in delivery.body
    assert Job.objects.get().pk == delivery.job_id
    # Once, not twice: the guarded attempt wrote no version and no audit entry.
    assert DocumentVersion.objects.filter(revision=document.revision).count() == 1
    assert AuditEntry.objects.filter(revision=document.revision).count() == 1
    # Something was queued: the next change is written with the clauses at once.
    _, statements = replace(workshop, "Node 28.")
    assert [with_clauses(sql) for sql in statements] == [True]
    assert Delivery.objects.count() == 2


def test_a_stale_change_under_the_guard_writes_nothing(workshop: Document) -> None:
    replace(workshop, "Node 24.")  # nothing wanted it: the next one is guarded
    with CaptureQueriesContext(connection) as captured, pytest.raises(PreconditionFailed):
        document_replace(
            resource=workshop.resource,
            doc_id="workshop",
            expected_revision=workshop.revision,  # before "Node 24."
            text="Lost.",
            actor="test",
        )
    writes = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("WITH")]
    # Under the guard first, then with the clauses: neither matched the revision.
    assert [guarded(writes[0]), with_clauses(writes[1])] == [True, True]
    assert len(writes) == 2
    assert Document.objects.get(pk=workshop.pk).text == "Node 24."
    assert not DocumentVersion.objects.filter(text="Lost.").exists()
    assert AuditEntry.objects.filter(action="document.replace").count() == 1


# (the replace's action, an endpoint's project (None: none), its events, whether active).
CASES = [
    ("replace", None, [], True),
    ("replace", "acme", ["document.updated"], True),
    ("replace", "acme", ["document.updated"], False),
    ("replace", "acme", ["document.deleted", "session.ended"], True),
    ("replace", "globex", ["document.updated"], True),
    ("save", "acme", ["memory.saved"], True),
    ("save", "acme", ["document.frozen"], True),
]


@pytest.mark.parametrize(("action", "owner", "events", "active"), CASES)
def test_the_guard_holds_exactly_when_the_clauses_write_nothing(
    workshop: Document, action: str, owner: str | None, events: list[str], active: bool
) -> None:
    if owner is not None:
        registered_elsewhere(Project.objects.get(pk=owner), events, active=active)
    resource = Resource.objects.get(pk=workshop.resource_id)
    facts = AuditFacts(
        project_id=resource.project_id,
        environment=resource.environment,
        actor="test",
        action=f"document.{action}",
        resource_id=resource.resource_id,
        document_id="workshop",
    )
    guard = outbox_guard(facts)
    assert guard is not None
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {guard.sql}", guard.params)
        (holds,) = cursor.fetchone()
    _, statements = replace(workshop, "Node 24.", action=action)  # with the clauses
    assert [with_clauses(sql) for sql in statements] == [True]
    assert holds is (not Delivery.objects.exists())
    # And the next change, under the guard where nothing was delivered, delivers the same.
    before = Delivery.objects.count()
    _, statements = replace(workshop, "Node 26.", action=action)
    assert guarded(statements[0]) is holds
    assert Delivery.objects.count() - before == before


def recorded(project_id: str | None, action: str = "document.delete") -> list[str]:
    """Records an audited change of the notes resource (as the services do after their own
    writes); the statements that wrote the audit entry (or tried to)."""
    with CaptureQueriesContext(connection) as captured:
        audit_record(
            project_id=project_id,
            environment="development",
            actor="test",
            action=action,
            resource_id="notes",
            document_id="gone",
        )
    return [q["sql"] for q in captured.captured_queries if "memory_auditentry" in q["sql"]]


def test_an_audited_change_is_one_statement_with_its_deliveries_or_their_guard(
    project: Project,
) -> None:
    # With the clauses first: the entry and any deliveries in one statement.
    assert [with_clauses(sql) for sql in recorded(project.id)] == [True]
    # Nothing was queued: the next under the guard, still one statement.
    assert [guarded(sql) for sql in recorded(project.id)] == [True]
    gone = AuditEntry.objects.filter(document_id="gone")
    assert gone.count() == 2
    endpoint = registered_elsewhere(project, ["document.deleted"])
    statements = recorded(project.id)
    # The guard failed: no entry from it; the entry and its delivery from the clauses.
    assert [guarded(statements[0]), with_clauses(statements[1])] == [True, True]
    assert len(statements) == 2
    assert gone.count() == 3
    delivery = Delivery.objects.get()
    assert (delivery.endpoint_id, delivery.event) == (endpoint.pk, "document.deleted")
    assert '"document":"gone"' in delivery.body
    assert Job.objects.get().pk == delivery.job_id
    # An action no event follows, and one of no project: the entry alone.
    for project_id, action in [(project.id, "key.create"), (None, "document.delete")]:
        (statement,) = recorded(project_id, action)
        assert "webhook" not in statement
        assert "NOT EXISTS" not in statement
    assert Counter(gone.values_list("project_id", "action")) == {
        ("acme", "document.delete"): 3,
        ("acme", "key.create"): 1,
        (None, "document.delete"): 1,
    }
