"""Deliveries are sent by runner jobs: each delivery gets its job, which carries its
attempts and next attempt (0004 drops the columns of the delivery's own queue; a
migration of its own, as PostgreSQL alters no table with checks pending)."""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.utils import timezone

DELIVER = "memoryadmin.webhooks.delivery.webhook_deliver"
DRAIN = "memoryadmin.webhooks.delivery.webhook_drain"
BATCH = 1000


def _job(job_model: Any, delivery: Any, now: Any) -> Any:
    """The job of one delivery, where its own queue left it."""
    state, finished, run_after = "pending", None, delivery.next_attempt_at
    if delivery.state == "sending":
        # Its sender may still be at it: due once its claim would have ended.
        run_after = max(delivery.lease_until or now, delivery.next_attempt_at)
    elif delivery.state == "delivered":
        state, finished = "done", delivery.delivered_at or now
    elif delivery.state == "failed":
        state, finished = "dead", delivery.last_attempt_at or now
    return job_model(
        name=DELIVER,
        project=delivery.endpoint.project_id,
        kwargs={"endpoint": delivery.endpoint_id, "event": delivery.event_id},
        line=f"webhook:{delivery.endpoint_id}",
        state=state,
        attempts=delivery.attempts,
        max_attempts=max(settings.MEMORYADMIN_WEBHOOK_MAX_ATTEMPTS, delivery.attempts),
        run_after=run_after,
        last_error=delivery.last_error if state != "done" else "",
        finished_at=finished,
    )


def forward(apps: Any, schema_editor: Any) -> None:
    job_model = apps.get_model("runner", "Job")
    delivery_model = apps.get_model("webhooks", "Delivery")
    # The drains of the old queue would never run again: their deliveries have jobs now.
    job_model.objects.filter(name=DRAIN, state__in=["pending", "running"]).delete()
    now = timezone.now()
    last = 0
    while True:
        # In id order, so that each endpoint's line keeps its order.
        batch = list(
            delivery_model.objects.select_related("endpoint")
            .filter(pk__gt=last, job__isnull=True)
            .order_by("pk")[:BATCH]
        )
        if not batch:
            return
        jobs = job_model.objects.bulk_create([_job(job_model, row, now) for row in batch])
        for delivery, job in zip(batch, jobs, strict=True):
            delivery.job_id = job.pk
            if delivery.state == "sending":
                delivery.state = "pending"
        delivery_model.objects.bulk_update(batch, ["job", "state"])
        last = batch[-1].pk


class Migration(migrations.Migration):
    dependencies = [
        ("runner", "0003_job_lines_and_deadlines"),
        ("webhooks", "0002_delivery_reply"),
    ]

    operations = [
        migrations.AddField(
            model_name="delivery",
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
