"""Migrations that moved deliveries and provider operations onto runner jobs carry
what was in flight over: each row gets its job, where its own queue had left it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from memoryadmin.runner.jobs import jobs_due
from memoryadmin.runner.models import Job
from memoryadmin.webhooks.models import Delivery

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [
    ("webhooks", "0002_delivery_reply"),
    ("agents", "0006_operation_action"),
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
        for name, state, attempts, extra in [
            ("done", "delivered", 1, {"response_code": 200, "delivered_at": now}),
            ("dead", "failed", 8, {"response_code": 500, "last_error": "HTTP 500"}),
            ("retrying", "pending", 2, {"next_attempt_at": now + timedelta(minutes=5)}),
            ("sending", "sending", 1, {"lease_until": now + timedelta(seconds=30)}),
            ("fresh", "pending", 0, {}),
        ]:
            fields = {"next_attempt_at": now, "created_at": now, **extra}
            rows[name] = apps.get_model("webhooks", "Delivery").objects.create(
                endpoint=endpoint, event_id=f"evt_{name}", event="document.created",
                body="{}", state=state, attempts=attempts, **fields,
            ).pk  # fmt: skip
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
        assert not Job.objects.filter(pk=drain.pk).exists()
        got = {name: Delivery.objects.select_related("job").get(pk=pk) for name, pk in rows.items()}
        jobs = {name: delivery.job for name, delivery in got.items()}
        assert all(job is not None for job in jobs.values())
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
