"""Durable background jobs on Django's tasks framework.

A job is a row written in the caller's transaction (an outbox): a change and
the work it causes commit together, so nothing runs for a rolled-back change
and nothing is lost when the process dies after the commit. On commit the job
is handed to the configured task backend (`TASKS`: the database by default,
RQ on Redis by configuration); the worker's sweep hands over again whatever
is due and was not picked up, including the job of a worker that died.

A run first claims the job (one UPDATE: the attempt is counted, a lease
taken), then runs the function. An atomic job's writes and its `done` mark
commit in one transaction, so a worker killed mid-run leaves nothing behind
and the job runs again once its lease has passed. A job that is not atomic
(it calls a provider) must be idempotent: it may run twice.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.tasks import task
from django.utils import timezone
from django.utils.module_loading import import_string

from memoryadmin.core.backoff import backoff_seconds
from memoryadmin.core.rows import column, table
from memoryadmin.runner.models import Job, JobState

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")
# Job functions carry this attribute; a row naming anything else is not run.
DURABLE = "durable_job"
ERROR_MAX = 4000


def durable(
    *, max_attempts: int = 5, atomic: bool = True
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Marks a function (keyword arguments only, JSON values) as a durable job."""

    def mark(function: Callable[P, R]) -> Callable[P, R]:
        setattr(function, DURABLE, {"max_attempts": max_attempts, "atomic": atomic})
        return function

    return mark


def _options(function: Callable[..., Any]) -> dict[str, Any]:
    options = getattr(function, DURABLE, None)
    if not isinstance(options, dict):
        raise TypeError(f"{function!r} is not marked @durable")
    return options


def _path(function: Callable[..., Any]) -> str:
    return f"{function.__module__}.{function.__qualname__}"


def enqueue(
    function: Callable[..., Any],
    *,
    project: str,
    key: str = "",
    delay: float = 0,
    **kwargs: Any,
) -> Job:
    """Writes a job of `project` ("" for none) in the current transaction; it is handed
    to the backend on commit.

    With a `key`, enqueuing while a job of that key is still open returns
    that job instead of adding another.
    """
    options = _options(function)
    now = timezone.now()
    try:
        with transaction.atomic():
            job = Job.objects.create(
                name=_path(function),
                project=project,
                kwargs=kwargs,
                key=key,
                max_attempts=options["max_attempts"],
                run_after=now + timedelta(seconds=delay),
            )
    except IntegrityError:
        return Job.objects.get(key=key, state__in=[JobState.PENDING, JobState.RUNNING])
    if delay <= 0:
        transaction.on_commit(lambda: _dispatch([job.pk]), robust=True)
    return job


def enqueue_sql(
    function: Callable[..., Any], *, project: str, rows: str, kwargs: str
) -> tuple[str, list[Any]]:
    """`INSERT INTO <jobs> ... SELECT ... FROM <rows> RETURNING id`: one job of `project`
    per row, for a PostgreSQL statement that also writes the change causing them (a
    `WITH` clause of it). `kwargs` is the SQL of each job's JSON arguments over `rows`.
    Hand the ids it returns to `jobs_dispatch_on_commit`."""
    options = _options(function)
    names = ["name", "project", "kwargs", "key", "state", "attempts", "max_attempts"]
    names += ["run_after", "created_at", "last_error"]
    targets = ", ".join(column(Job, name) for name in names)
    now = timezone.now()
    sql = (
        f"INSERT INTO {table(Job)} ({targets})"
        f" SELECT %s, %s, {kwargs}, '', %s, 0, %s, %s, %s, '' FROM {rows}"
        f" RETURNING {column(Job, 'id')}"
    )
    params = [_path(function), project, JobState.PENDING, options["max_attempts"], now, now]
    return sql, params


def jobs_dispatch_on_commit(job_ids: list[int]) -> None:
    """Hands jobs written by `enqueue_sql` to the backend once their transaction commits."""
    if job_ids:
        transaction.on_commit(lambda: _dispatch(list(job_ids)), robust=True)


# What the backend's task does with a job: runs it here and now, unless a worker
# installed its pool (runner/pool.py), which takes it to run on one of its threads.
_runner: list[Callable[[int], str]] = []


@contextmanager
def jobs_run_by(runner: Callable[[int], str]) -> Iterator[None]:
    """Inside the block, the backend's tasks hand their job to `runner`."""
    _runner.append(runner)
    try:
        yield
    finally:
        _runner.remove(runner)


@task(queue_name=settings.MEMORYADMIN_TASKS_QUEUE)
def run_job(job_id: int) -> str:
    """The one task the backend runs: one attempt of one durable job."""
    return _runner[-1](job_id) if _runner else job_run(job_id)


def _dispatch(job_ids: list[int]) -> None:
    """Hands jobs to the task backend; a failure here is repaired by the next sweep."""
    for job_id in job_ids:
        Job.objects.filter(pk=job_id).update(dispatched_at=timezone.now())
        try:
            run_job.enqueue(job_id)
        except Exception:
            logger.exception("could not hand job %s to the task backend", job_id)


def _lease() -> timedelta:
    return timedelta(seconds=settings.MEMORYADMIN_JOB_LEASE_SECONDS)


def _backoff(attempts: int) -> timedelta:
    return timedelta(seconds=backoff_seconds(settings.MEMORYADMIN_JOB_BACKOFF_SECONDS, attempts))


def jobs_due() -> list[int]:
    """Jobs the backend should run now and may not have: never handed over, handed
    over a lease ago without a run, or running past their lease (the worker died)."""
    now = timezone.now()
    stale = now - _lease()
    pending = Q(state=JobState.PENDING, run_after__lte=now) & (
        Q(dispatched_at__isnull=True) | Q(dispatched_at__lt=stale)
    )
    abandoned = Q(state=JobState.RUNNING, lease_until__lt=now)
    return list(
        Job.objects.filter(pending | abandoned)
        .order_by("run_after")
        .values_list("pk", flat=True)[:500]
    )


def jobs_sweep() -> int:
    """Hands every due job to the backend; the worker calls it between batches."""
    due = jobs_due()
    _dispatch(due)
    return len(due)


def _claim(job_id: int) -> Job | None:
    now = timezone.now()
    claimable = Q(state=JobState.PENDING, run_after__lte=now) | Q(
        state=JobState.RUNNING, lease_until__lt=now
    )
    claimed = Job.objects.filter(claimable, pk=job_id).update(
        state=JobState.RUNNING, attempts=F("attempts") + 1, lease_until=now + _lease()
    )
    return Job.objects.get(pk=job_id) if claimed else None


class _LeaseLost(Exception):
    pass


def _finish(job: Job) -> None:
    finished = Job.objects.filter(pk=job.pk, state=JobState.RUNNING, attempts=job.attempts).update(
        state=JobState.DONE, finished_at=timezone.now(), lease_until=None, last_error=""
    )
    if not finished:
        # Another worker took the job over after our lease passed: our work
        # must not count (an atomic job's writes roll back with this).
        raise _LeaseLost()


def job_run(job_id: int) -> str:
    """One attempt: "done", "retry", "dead", or "skipped" (not due, or someone else's)."""
    job = _claim(job_id)
    if job is None:
        return "skipped"
    try:
        function = import_string(job.name)
        atomic = _options(function)["atomic"]
        if atomic:
            with transaction.atomic():
                function(**job.kwargs)
                _finish(job)
        else:
            function(**job.kwargs)
            _finish(job)
    except _LeaseLost:
        return "skipped"
    except Exception as exc:
        return _failed(job, exc)
    return "done"


def _failed(job: Job, exc: BaseException) -> str:
    error = "".join(traceback.format_exception_only(exc)).strip()[:ERROR_MAX]
    logger.warning("job %s (%s) attempt %d failed: %s", job.pk, job.name, job.attempts, error)
    dead = job.attempts >= job.max_attempts
    Job.objects.filter(pk=job.pk, state=JobState.RUNNING, attempts=job.attempts).update(
        state=JobState.DEAD if dead else JobState.PENDING,
        run_after=timezone.now() + _backoff(job.attempts),
        lease_until=None,
        dispatched_at=None,
        last_error=error,
        finished_at=timezone.now() if dead else None,
    )
    return "dead" if dead else "retry"


def jobs_run_due(limit: int = 100) -> dict[str, int]:
    """Runs due jobs in this process (tests, and a worker without a backend queue)."""
    counts: dict[str, int] = {}
    for job_id in jobs_due()[:limit]:
        outcome = _runner[-1](job_id) if _runner else job_run(job_id)
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts
