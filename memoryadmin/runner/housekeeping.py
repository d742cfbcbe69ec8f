"""What `manage.py worker` keeps from growing without end: rows nobody reads once their
time has passed, removed once an hour (`HOUSEKEEPING_SECONDS`) by each worker.

- The database task backend's results of finished tasks: each attempt of a job is one
  task, whose row the backend marks finished and keeps; the job's own row is the record
  (its state, attempts and last error), so a finished task's row is read by nothing. Kept
  `MEMORYADMIN_TASK_RESULTS_KEEP_HOURS` after it finished (a day), for an operator who
  looks. (RQ keeps its results in Redis for minutes, by itself.)
- Expired sign-in sessions of the pages, as Django's `clearsessions` removes them.

Rows are deleted in batches of `BATCH`, each its own statement, so no transaction holds
a long lock on a large table. Several workers doing it at once delete each row once.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from importlib import import_module

from django.conf import settings
from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, task_backends
from django.utils import timezone

logger = logging.getLogger("memoryadmin.worker")

HOUSEKEEPING_SECONDS = 3600.0
BATCH = 5000


def housekeeping() -> int:
    """Removes what has outlived its use (above); returns how many task results."""
    removed = _task_results()
    # Django's `clearsessions`, whatever the session engine.
    import_module(settings.SESSION_ENGINE).SessionStore.clear_expired()
    if removed:
        logger.info("housekeeping: removed %d finished task results", removed)
    return removed


def _task_results() -> int:
    from django_tasks_db.backend import DatabaseBackend
    from django_tasks_db.models import DBTaskResult

    backend = task_backends[DEFAULT_TASK_BACKEND_ALIAS]
    if not isinstance(backend, DatabaseBackend):
        return 0
    kept = timedelta(hours=settings.MEMORYADMIN_TASK_RESULTS_KEEP_HOURS)
    # Without the model's ordering (priority, run_after, enqueued_at): each batch would
    # sort every old row to pick the first 5,000.
    old = (
        DBTaskResult.objects.finished()
        .filter(backend_name=backend.alias, finished_at__lt=timezone.now() - kept)
        .order_by()
    )
    removed = 0
    while True:
        batch = list(old.values_list("pk", flat=True)[:BATCH])
        if not batch:
            return removed
        removed += DBTaskResult.objects.filter(pk__in=batch).delete()[0]
        if len(batch) < BATCH:
            return removed
