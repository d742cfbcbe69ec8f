"""Provider operations are checked by runner jobs: each operation gets its job, which
carries its checks, their deadline and the next one (0010 drops the operation's own
columns for them; a migration of its own, as PostgreSQL alters no table with checks
pending)."""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import migrations, models
from django.utils import timezone

RECONCILE = "memoryadmin.agents.services.operations.operation_reconcile"
BATCH = 1000
# The operation's state, and its job's.
JOB_STATES = {
    "queued": "pending",
    "partial": "pending",
    "succeeded": "done",
    "failed": "done",
    "dead": "dead",
    "discarded": "discarded",
}


def _job(job_model: Any, operation: Any, now: Any) -> Any:
    state = JOB_STATES.get(operation.state, "done")
    return job_model(
        name=RECONCILE,
        project=operation.project_id,
        kwargs={"operation_id": operation.pk},
        state=state,
        attempts=operation.attempts,
        max_attempts=max(operation.max_attempts, operation.attempts),
        deadline_at=operation.deadline_at,
        run_after=operation.next_check_at,
        last_error=operation.last_error if state == "dead" else "",
        finished_at=None if state == "pending" else (operation.finished_at or now),
    )


def forward(apps: Any, schema_editor: Any) -> None:
    job_model = apps.get_model("runner", "Job")
    operation_model = apps.get_model("agents", "ProviderOperation")
    # The old reconcile jobs counted their own attempts: each operation's job replaces them.
    job_model.objects.filter(name=RECONCILE, state__in=["pending", "running"]).delete()
    now = timezone.now()
    while True:
        batch = list(operation_model.objects.filter(job__isnull=True).order_by("pk")[:BATCH])
        if not batch:
            return
        jobs = job_model.objects.bulk_create([_job(job_model, row, now) for row in batch])
        for operation, job in zip(batch, jobs, strict=True):
            operation.job_id = job.pk
        operation_model.objects.bulk_update(batch, ["job"])


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0008_operation_erasure_delete"),
        ("runner", "0003_job_lines_and_deadlines"),
    ]

    operations = [
        migrations.AddField(
            model_name="provideroperation",
            name="job",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="runner.job",
            ),
        ),
        migrations.RunPython(forward, migrations.RunPython.noop),
    ]
