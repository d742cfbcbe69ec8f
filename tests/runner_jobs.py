"""Durable jobs the suite runs in real worker processes (tests/test_runner.py).

`python manage.py shell -c` calls `enqueue_*`, `state` and `wait_done` here, with the same
database as the worker, so the test sees what a worker did only through the
database, as an operator would.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
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


@durable(max_attempts=1)
def write_when_told(*, label: str, marker: str) -> None:
    """Marks that it started, waits (a minute at most) for `<marker>.go`, then writes."""
    Path(marker).write_text("started")
    go = Path(marker + ".go")
    deadline = time.monotonic() + 60
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    _write(label, 1)


def enqueue_marked(function: Callable[..., None], label: str, marker: str) -> None:
    """Enqueues one of the jobs above (write_twice, write_when_told); prints its id."""
    with transaction.atomic():
        job = enqueue(function, project="", label=label, marker=marker)
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


def wait_done(label: str, seconds: float = 60) -> None:
    """Waits (a minute at most) for the first job of `label` to be done, reading the
    database every 50 ms: one process for the whole wait. Prints whether it is."""
    deadline = time.monotonic() + seconds
    while True:
        first = Job.objects.filter(kwargs__label=label).order_by("pk").first()
        done = first is not None and first.state == "done"
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    print(json.dumps(done))


def webhook_change(url: str, *doc_ids: str) -> str:
    """A project with a webhook endpoint to `url`, then documents created: the
    endpoint's signing secret."""
    from memoryadmin.memory.services.deployments import deployment_create, resource_get
    from memoryadmin.memory.services.documents import document_create
    from memoryadmin.memory.services.projects import project_create
    from memoryadmin.webhooks.services import endpoint_create
    from tests.helpers import MANIFEST_MEMORY

    project = project_create(project_id="acme", name="Acme", actor="test")
    deployment_create(
        project=project,
        agent="support-bot",
        memory=MANIFEST_MEMORY,
        promote="development",
        actor="t",
    )
    notes = resource_get(project=project, environment="development", resource_id="notes")
    _, secret = endpoint_create(project=project, url=url, events=["document.created"], actor="t")
    for doc_id in doc_ids:
        document_create(resource=notes, doc_id=doc_id, title=doc_id, actor="t")
    return secret


def task_results() -> None:
    """Prints how many of the task backend's results finished over an hour ago, within the
    hour, or not yet, and how many sessions have expired, as JSON."""
    from datetime import timedelta

    from django.contrib.sessions.models import Session
    from django.utils import timezone
    from django_tasks_db.models import DBTaskResult

    hour_ago = timezone.now() - timedelta(hours=1)
    results = DBTaskResult.objects
    print(
        json.dumps(
            {
                "old": results.filter(finished_at__lt=hour_ago).count(),
                "recent": results.filter(finished_at__gte=hour_ago).count(),
                "open": results.filter(finished_at__isnull=True).count(),
                "expired_sessions": Session.objects.filter(expire_date__lt=timezone.now()).count(),
            }
        )
    )


def task_results_age(hours: float) -> None:
    """Makes the finished task results `hours` older, and adds an expired session."""
    from datetime import timedelta

    from django.contrib.sessions.models import Session
    from django.db.models import F
    from django.utils import timezone
    from django_tasks_db.models import DBTaskResult

    DBTaskResult.objects.filter(finished_at__isnull=False).update(
        finished_at=F("finished_at") - timedelta(hours=hours)
    )
    Session.objects.create(
        session_key="e" * 32, session_data="", expire_date=timezone.now() - timedelta(days=1)
    )
