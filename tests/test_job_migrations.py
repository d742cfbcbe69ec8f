"""Migrations that moved deliveries and provider operations onto runner jobs carry
what was in flight over: each row gets its job, where its own queue had left it. The
migrations that let receipts and containment reports keep the operations they name find
those the stored ones name."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from memoryadmin.agents.models import ProviderOperation
from memoryadmin.agents.services.operations import operation_dict
from memoryadmin.runner.jobs import jobs_due
from memoryadmin.runner.models import Job
from memoryadmin.webhooks.models import Delivery

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [
    ("webhooks", "0002_delivery_reply"),
    ("agents", "0008_operation_erasure_delete"),
    ("runner", "0002_job_project"),
]


def _migrate(targets: list[tuple[str, str]]) -> Any:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_deliveries_in_flight_become_jobs_of_their_endpoints_line() -> None:
    apps = _migrate(BEFORE)
    try:
        now = timezone.now()
        project = apps.get_model("memory", "Project").objects.create(id="old", name="Old")
        endpoint = apps.get_model("webhooks", "Endpoint").objects.create(
            project=project, url="https://example.com/h", events=",document.created,",
            secret="whsec_x", created_at=now,
        )  # fmt: skip
        old_job = apps.get_model("runner", "Job")
        drain = old_job.objects.create(
            name="memoryadmin.webhooks.delivery.webhook_drain",
            project="old",
            kwargs={"endpoint": endpoint.pk},
            run_after=now,
        )
        rows = {}
        cases: list[tuple[str, str, int, dict[str, Any]]] = [
            ("done", "delivered", 1, {"response_code": 200, "delivered_at": now}),
            ("dead", "failed", 8, {"response_code": 500, "last_error": "HTTP 500"}),
            ("retrying", "pending", 2, {"next_attempt_at": now + timedelta(minutes=5)}),
            ("sending", "sending", 1, {"lease_until": now + timedelta(seconds=30)}),
            ("fresh", "pending", 0, {}),
        ]
        for name, state, attempts, extra in cases:
            fields = {"next_attempt_at": now, "created_at": now, **extra}
            rows[name] = apps.get_model("webhooks", "Delivery").objects.create(
                endpoint=endpoint, event_id=f"evt_{name}", event="document.created",
                body="{}", state=state, attempts=attempts, **fields,
            ).pk  # fmt: skip
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
        assert not Job.objects.filter(pk=drain.pk).exists()
        got = {name: Delivery.objects.select_related("job").get(pk=pk) for name, pk in rows.items()}
        jobs = {name: d.job for name, d in got.items() if d.job is not None}
        assert jobs.keys() == got.keys()
        assert {(name, d.state, d.attempts) for name, d in got.items()} == {
            ("done", "delivered", 1),
            ("dead", "failed", 8),
            ("retrying", "pending", 2),
            ("sending", "pending", 1),
            ("fresh", "pending", 0),
        }
        assert {name: job.state for name, job in jobs.items()} == {
            "done": "done", "dead": "dead", "retrying": "pending", "sending": "pending",
            "fresh": "pending",
        }  # fmt: skip
        assert jobs["dead"].last_error == "HTTP 500"
        assert {job.line for job in jobs.values()} == {f"webhook:{endpoint.pk}"}
        assert jobs["fresh"].kwargs == {"endpoint": endpoint.pk, "event": "evt_fresh"}
        # The line keeps the deliveries' order: the retrying one holds the others.
        assert sorted(jobs.values(), key=lambda j: j.pk) == [jobs[n] for n in rows]
        assert got["retrying"].next_attempt_at == now + timedelta(minutes=5)
        assert jobs_due() == []
    finally:
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def test_operations_in_flight_become_jobs_keeping_their_checks_and_deadline() -> None:
    apps = _migrate(BEFORE)
    try:
        now = timezone.now()
        project = apps.get_model("memory", "Project").objects.create(id="old", name="Old")
        resource = apps.get_model("memory", "Resource").objects.create(
            project=project, environment="development", resource_id="mem", kind="mem0-oss",
            max_bytes=8192,
        )  # fmt: skip
        reconcile = "memoryadmin.agents.services.operations.operation_reconcile"
        old_jobs = apps.get_model("runner", "Job").objects
        stale = old_jobs.create(
            name=reconcile, project="old", kwargs={"operation_id": "mop_later"}, run_after=now
        )
        deadline = now + timedelta(hours=20)
        made = {}
        for name, state, attempts, next_check in [
            ("later", "queued", 2, now + timedelta(minutes=5)),
            ("due", "partial", 1, now - timedelta(seconds=1)),
            ("dead", "dead", 12, now),
            ("done", "succeeded", 3, now),
        ]:
            made[name] = apps.get_model("agents", "ProviderOperation").objects.create(
                id=f"mop_{name}", project=project, environment="development", resource=resource,
                principal="owner", kind="accepted_write", provider_operation="p", state=state,
                attempts=attempts, max_attempts=12, deadline_at=deadline,
                next_check_at=next_check, last_error="boom" if state == "dead" else "",
                created_at=now, updated_at=now,
                finished_at=now if state in {"dead", "succeeded"} else None,
            ).pk  # fmt: skip
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
        assert not Job.objects.filter(pk=stale.pk).exists()
        got = {
            name: ProviderOperation.objects.select_related("resource", "job").get(pk=pk)
            for name, pk in made.items()
        }
        shown = {name: operation_dict(operation) for name, operation in got.items()}
        assert {n: (o["state"], o["attempts"], o["maxAttempts"]) for n, o in shown.items()} == {
            "later": ("queued", 2, 12),
            "due": ("partial", 1, 12),
            "dead": ("dead", 12, 12),
            "done": ("succeeded", 3, 12),
        }
        assert {o["deadlineAt"] for o in shown.values()} == {shown["later"]["deadlineAt"]}
        assert got["later"].next_check_at == now + timedelta(minutes=5)
        assert (shown["dead"]["nextCheckAt"], shown["done"]["nextCheckAt"]) == (None, None)
        assert {name: o.job.state for name, o in got.items() if o.job} == {
            "later": "pending", "due": "pending", "dead": "dead", "done": "done",
        }  # fmt: skip
        assert got["dead"].job is not None
        assert got["dead"].job.last_error == "boom"
        assert got["later"].job is not None
        assert got["later"].job.kwargs == {"operation_id": "mop_later"}
        # The one whose check is due is handed to the worker; the others wait.
        assert jobs_due() == [got["due"].job_id]
    finally:
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def test_the_operations_stored_receipts_and_reports_name_are_kept_by_them() -> None:
    from memoryadmin.erasures.models import NamedOperation as ErasureNamed
    from memoryadmin.incidents.models import NamedOperation as IncidentNamed

    apps = _migrate([("erasures", "0001_initial"), ("incidents", "0001_initial")])
    try:
        now = timezone.now()
        project = apps.get_model("memory", "Project").objects.create(id="old", name="Old")
        where = {"resource": "mem", "namespace": "alice"}
        external = {
            "deleted": [{**where, "record": "r1"}],
            "queued": [{**where, "record": "r2", "operation": "mop_queued"}],
            "failed": [
                {**where, "record": "r3", "operation": "mop_failed", "error": "down"},
                {**where, "record": None, "operation": "mop_unread", "error": "down"},
            ],
        }
        for erasure_id, outcome in [("era_mixed", external), ("era_clean", {"deleted": []})]:
            apps.get_model("erasures", "Erasure").objects.create(
                id=erasure_id, project=project, environment="development", actor="t",
                reason="r", match_kind="text", complete=False, created_at=now,
                signed={"receipt": {"external": outcome}, "signature": {}},
            )  # fmt: skip
        incidents = apps.get_model("incidents", "Incident").objects
        for incident_id, report, contained in [
            ("inc_dead", {"deadLetters": ["mop_undo", "mop_undo"]}, now),
            ("inc_none", {"deadLetters": []}, now),
            ("inc_open", {}, None),
        ]:
            incidents.create(
                id=incident_id, project=project, environment="development", title="t",
                source={"text": "x"}, hops=1, created_by="t", created_at=now,
                contained_at=contained, containment=report,
            )  # fmt: skip
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
        assert set(ErasureNamed.objects.values_list("erasure_id", "operation_id")) == {
            ("era_mixed", "mop_queued"),
            ("era_mixed", "mop_failed"),
            ("era_mixed", "mop_unread"),
        }
        assert list(IncidentNamed.objects.values_list("incident_id", "operation_id")) == [
            ("inc_dead", "mop_undo")
        ]
    finally:
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


@pytest.mark.postgres
def test_an_index_a_failed_concurrent_build_left_invalid_is_built_again() -> None:
    """A concurrent build that failed leaves its index invalid; the migration run again
    replaces it with a valid one instead of failing on "already exists"."""
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()
    try:
        _migrate([("runner", "0003_job_lines_and_deadlines")])
        with connection.cursor() as cursor:
            # What an interrupted CREATE INDEX CONCURRENTLY leaves: the index, marked invalid.
            cursor.execute('CREATE INDEX "job_finished" ON "runner_job" ("state")')
            cursor.execute(
                "UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'job_finished'::regclass"
            )
        _migrate([("runner", "0004_job_finished_index")])
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT indisvalid, pg_get_indexdef(indexrelid) FROM pg_index"
                " WHERE indexrelid = 'job_finished'::regclass"
            )
            valid, definition = cursor.fetchone()
        assert valid is True
        assert '("state", finished_at)' in definition or "(state, finished_at)" in definition
    finally:
        _migrate(latest)
