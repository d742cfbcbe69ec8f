"""What `manage.py worker` keeps from growing without end: rows nobody reads once their
time has passed, removed once an hour (`HOUSEKEEPING_SECONDS`) by each worker.

- The database task backend's results of finished tasks: each attempt of a job is one
  task, whose row the backend marks finished and keeps; the job's own row is the record
  (its state, attempts and last error), so a finished task's row is read by nothing. Kept
  `MEMORYADMIN_TASK_RESULTS_KEEP_HOURS` after it finished (a day), for an operator who
  looks. (RQ keeps its results in Redis for minutes by itself.)
- Expired sign-in sessions of the pages, as Django's `clearsessions` removes them.
- The records of the apps above that registered theirs (`records_register`, from their
  `ready()`): finished webhook deliveries and provider operations past their days. A
  record keeps the job that ran its work (its attempts are the job's), and the job goes
  with it.
- Finished jobs that no record refers to, `MEMORYADMIN_JOBS_KEEP_DAYS` after they
  finished (a job whose record went some other way: its endpoint deleted, say). An open
  job is never removed.

Rows are deleted in batches of `BATCH`, each its own statement (a record's batch and its
jobs, one transaction), each checking again that its rows are due, so no transaction
holds a long lock on a large table and a row changed meanwhile (a delivery sent again) is
kept. A call lasts about `BUDGET_SECONDS`: it starts no other kind of row once its budget
is spent, the worker runs its jobs between calls, and calls again at once while rows are
left (a large backlog, after an upgrade say, never holds its jobs up). Several workers
doing it at once delete each row once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from importlib import import_module
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, task_backends
from django.utils import timezone

from memoryadmin.runner.models import FINISHED_STATES, Job

logger = logging.getLogger("memoryadmin.worker")

HOUSEKEEPING_SECONDS = 3600.0
BATCH = 5000
BUDGET_SECONDS = 1.0


@dataclass
class Swept:
    """What one call removed (how many of each kind, in the log's words; kinds it removed
    none of are left out), and whether it removed everything due (else its budget ran
    out first)."""

    removed: dict[str, int] = field(default_factory=dict)
    done: bool = True


# The rows past their time, as a query (None: none, or kept for ever).
type Due = Callable[[], QuerySet[Any] | None]
# Deletes the rows of a batch (their keys) that are still due: how many it deleted.
type Remove = Callable[[QuerySet[Any], list[Any]], int]


@dataclass(frozen=True)
class _Records:
    what: str
    model: type[models.Model]
    due: Due
    days: Callable[[], int]


_records: list[_Records] = []


def records_register(
    what: str, model: type[models.Model], due: Due, days: Callable[[], int]
) -> None:
    """Records of an app above the runner (`model`, with a foreign key `job` to the job
    that runs their work) that housekeeping removes once `due()` says they are past their
    time, their jobs with them; `what` names them in the log, `days()` is how long they
    are kept at most after they finished (0: for ever). Called from the app's `ready()`.
    A job a record of such a model refers to is never removed by itself."""
    _records.append(_Records(what, model, due, days))


def housekeeping(budget: float = BUDGET_SECONDS) -> Swept:
    """Removes what has outlived its use (above), for about `budget` seconds: once it is
    spent, after a kind of row that removed some, the rest waits for the next call."""
    until = time.monotonic() + budget
    swept = Swept()
    for what, due, remove in _kinds():
        if swept.removed and time.monotonic() >= until:
            swept.done = False
            break
        removed, done = _in_batches(due(), until, remove)
        if removed:
            swept.removed[what] = removed
        if not done:
            swept.done = False
            break
    if swept.removed:
        logger.info(
            "housekeeping: removed %s%s",
            ", ".join(f"{count} {what}" for what, count in swept.removed.items()),
            "" if swept.done else "; more next",
        )
    return swept


def records_remove(rows: QuerySet[Any], budget: float | None = None) -> tuple[int, bool]:
    """Deletes `rows`, records of a registered model (`records_register`), with the jobs
    they refer to, as housekeeping does: a batch at a time, each its own transaction, for
    about `budget` seconds (one batch at least). How many, and whether none is left. For
    records that go before their days (a deleted webhook endpoint's deliveries); the
    budget is `BUDGET_SECONDS` unless given."""
    until = time.monotonic() + (BUDGET_SECONDS if budget is None else budget)
    return _in_batches(rows.order_by(), until, _with_jobs(rows.model))


def _kinds() -> Iterator[tuple[str, Due, Remove | None]]:
    """Each kind of row, in the order removed: the records before the jobs, so a job
    whose record went is removed in the same call."""
    yield "finished task results", _task_results, None
    yield "expired sessions", _expired_sessions, None
    for records in _records:
        yield records.what, records.due, _with_jobs(records.model)
    yield "finished jobs", _finished_jobs, None


def _in_batches(
    rows: QuerySet[Any] | None, until: float, remove: Remove | None = None
) -> tuple[int, bool]:
    """Deletes `rows` (unordered) `BATCH` at a time until none is left or `until` has
    passed: how many, and whether none is left. Each batch's statement checks `rows`'
    conditions again: a row that changed since it was read is kept."""
    if rows is None:
        return 0, True
    removed = 0
    while True:
        batch = list(rows.values_list("pk", flat=True)[:BATCH])
        if batch:
            removed += (remove or _remove)(rows, batch)
        if len(batch) < BATCH:
            return removed, True
        if time.monotonic() >= until:
            return removed, False


def _remove(rows: QuerySet[Any], batch: list[Any]) -> int:
    return rows.filter(pk__in=batch).delete()[1].get(rows.model._meta.label, 0)


def _with_jobs(model: type[models.Model]) -> Remove:
    """Deletes a batch of records, and the jobs they referred to that nothing else does,
    in one transaction."""

    def remove(rows: QuerySet[Any], batch: list[Any]) -> int:
        with transaction.atomic():
            doomed = rows.filter(pk__in=batch)
            jobs = list(doomed.exclude(job=None).values_list("job", flat=True))
            removed = _remove(rows, batch)
            _unowned(Job.objects.filter(pk__in=jobs)).delete()
        return removed

    return remove


def _unowned(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """Of `jobs`, those no registered record refers to."""
    for records in _records:
        owners = records.model._default_manager.filter(job=OuterRef("pk"))
        jobs = jobs.exclude(Exists(owners))
    return jobs


def _finished_jobs() -> QuerySet[Any] | None:
    """Finished jobs that no record refers to, `MEMORYADMIN_JOBS_KEEP_DAYS` after they
    finished and never before the records that could refer to them are removed (None:
    any of them kept for ever). So the jobs read to find them are those of records that
    are never removed (dead letters, an owner's to settle) and few others: a records'
    period longer than the jobs' would have each call read every job of a record kept
    longer (the jobs of a year of deliveries, a second and more)."""
    days = [settings.MEMORYADMIN_JOBS_KEEP_DAYS, *(r.days() for r in _records)]
    if not all(days):
        return None
    finished = Job.objects.filter(
        state__in=FINISHED_STATES, finished_at__lt=timezone.now() - timedelta(days=max(days))
    )
    return _unowned(finished).order_by()


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
