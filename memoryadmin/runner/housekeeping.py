"""What `manage.py worker` keeps from growing without end: rows nobody reads once their
time has passed, removed once an hour (`HOUSEKEEPING_SECONDS`) by each worker.

- The database task backend's results of finished tasks: each attempt of a job is one
  task, whose row the backend marks finished and keeps; the job's own row is the record
  (its state, attempts and last error), so a finished task's row is read by nothing. Kept
  `MEMORYADMIN_TASK_RESULTS_KEEP_HOURS` after it finished (a day), for an operator who
  looks. (RQ keeps its results in Redis for minutes, by itself.)
- Expired sign-in sessions of the pages, as Django's `clearsessions` removes them.

Rows are deleted in batches of `BATCH`, each its own statement, so no transaction holds
a long lock on a large table, for at most `BUDGET_SECONDS` a call: the worker runs its
jobs between calls, and calls again at once while rows are left (a large backlog, after
an upgrade say, never holds its jobs up). Several workers doing it at once delete each row
once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from importlib import import_module
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, task_backends
from django.utils import timezone

logger = logging.getLogger("memoryadmin.worker")

HOUSEKEEPING_SECONDS = 3600.0
BATCH = 5000
BUDGET_SECONDS = 1.0


@dataclass
class Swept:
    """What one call removed, and whether it removed everything due (else its budget
    ran out first)."""

    task_results: int = 0
    sessions: int = 0
    done: bool = True


def housekeeping(budget: float = BUDGET_SECONDS) -> Swept:
    """Removes what has outlived its use (above), for about `budget` seconds at most."""
    until = time.monotonic() + budget
    swept = Swept()
    swept.task_results, done = _in_batches(_task_results(), until)
    if done:
        swept.sessions, done = _in_batches(_expired_sessions(), until)
    swept.done = done
    if swept.task_results or swept.sessions:
        logger.info(
            "housekeeping: removed %d finished task results and %d expired sessions%s",
            swept.task_results,
            swept.sessions,
            "" if done else "; more next",
        )
    return swept


def _in_batches(rows: QuerySet[Any] | None, until: float) -> tuple[int, bool]:
    """Deletes `rows` (unordered) `BATCH` at a time until none is left or `until` has
    passed: how many, and whether none is left."""
    if rows is None:
        return 0, True
    model = rows.model
    removed = 0
    while True:
        batch = list(rows.values_list("pk", flat=True)[:BATCH])
        if batch:
            removed += model._default_manager.filter(pk__in=batch).delete()[0]
        if len(batch) < BATCH:
            return removed, True
        if time.monotonic() >= until:
            return removed, False


def _task_results() -> QuerySet[Any] | None:
    from django_tasks_db.backend import DatabaseBackend
    from django_tasks_db.models import DBTaskResult

    backend = task_backends[DEFAULT_TASK_BACKEND_ALIAS]
    if not isinstance(backend, DatabaseBackend):
        return None
    kept = timedelta(hours=settings.MEMORYADMIN_TASK_RESULTS_KEEP_HOURS)
    # Without the model's ordering (priority, run_after, enqueued_at): each batch would
    # sort every old row to pick the first 5,000.
    return (
        DBTaskResult.objects.finished()
        .filter(backend_name=backend.alias, finished_at__lt=timezone.now() - kept)
        .order_by()
    )


def _expired_sessions() -> QuerySet[Any] | None:
    """The database sessions' expired rows, as Django's `clearsessions` removes them (in
    one statement); another session engine's `clear_expired` is called as it is."""
    store = import_module(settings.SESSION_ENGINE).SessionStore
    model_class = getattr(store, "get_model_class", None)
    if model_class is None:
        store.clear_expired()
        return None
    return model_class().objects.filter(expire_date__lt=timezone.now()).order_by()
