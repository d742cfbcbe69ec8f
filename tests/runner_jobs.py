"""Durable jobs the suite runs in real worker processes (tests/test_runner.py).

`python manage.py shell -c` calls `enqueue_*` and `state` here, with the same
database as the worker, so the test sees what a worker did only through the
database, as an operator would.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from django.db import transaction

from memoryadmin.memory.models import AuditEntry
from memoryadmin.memory.services.audit import audit_record
from memoryadmin.runner.jobs import durable, enqueue
from memoryadmin.runner.models import Job

ACTION = "runner.test"


def _write(label: str, step: int) -> None:
    audit_record(
        project_id=None,
        environment="",
        actor="system:test",
        action=ACTION,
        detail={"label": label, "step": step},
    )


@durable(max_attempts=3)
def write_twice(*, label: str, marker: str) -> None:
    """Two writes; on its first attempt it stops between them until killed."""
    _write(label, 1)
    if not Path(marker).exists():
        Path(marker).write_text("between the writes")
        time.sleep(120)
    _write(label, 2)


def enqueue_write_twice(label: str, marker: str) -> None:
    with transaction.atomic():
        job = enqueue(write_twice, label=label, marker=marker)
    print(job.pk)


def state(label: str) -> None:
    """Prints the jobs and the writes of `label` as JSON."""
    jobs = [
        {"state": job.state, "attempts": job.attempts}
        for job in Job.objects.filter(kwargs__label=label).order_by("pk")
    ]
    steps = sorted(
        entry.detail["step"]
        for entry in AuditEntry.objects.filter(action=ACTION)
        if entry.detail.get("label") == label
    )
    print(json.dumps({"jobs": jobs, "steps": steps}))
