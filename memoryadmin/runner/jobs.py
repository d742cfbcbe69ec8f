"""Durable background jobs on Django's tasks framework: the one state machine of
background work (claim, lease, backoff, dead jobs, retry), whatever the job does.

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

Whether a job is due, whether a lease has passed, and when a new lease ends
are decided by the database's clock (`Now()` in the statement), never by the
worker host's: workers whose clocks differ agree on who holds a job (one whose
clock ran ahead took over a lease still running, and a webhook was sent twice
at once; one behind kept a dead lease).

A job kind (a function marked `@durable`) says its policy: attempts, the base
of its backoff, its lease, a deadline, and what becomes of its domain record
when it dies (`on_dead`). It raises `RetryAfter` when this attempt did not
finish the work (a receiver's Retry-After is honoured), `Postpone` when it
could not start it (no attempt spent). Jobs of one `line` run one at a time,
oldest first (a webhook endpoint's deliveries).
"""

from __future__ import annotations

import contextvars
import functools
import logging
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, IntegrityError, transaction
from django.db.models import (
    Case,
    DateTimeField,
    Exists,
    F,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Value,
    When,
)
from django.db.models.expressions import Combinable
from django.db.models.functions import Now
from django.db.models.sql import Query
from django.tasks import task
from django.utils import timezone
from django.utils.module_loading import import_string

from memoryadmin.core.backoff import backoff_seconds
from memoryadmin.core.dbclock import db_after
from memoryadmin.core.rows import NotBlank, column, database_vendor, table
from memoryadmin.runner.models import OPEN_STATES, Job, JobState

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")
# Job functions carry this attribute; a row naming anything else is not run.
DURABLE = "durable_job"
ERROR_MAX = 4000
# Inserts of a keyed job, each meeting an open job of its key that was gone when read
# (it finished meanwhile), before the error is taken to be something else.
KEY_TRIES = 5

# A policy value: fixed, or read when it is needed (a setting).
type Setting[T] = T | Callable[[], T]


def _value[V](setting: Setting[V]) -> V:
    return setting() if callable(setting) else setting


class RetryAfter(Exception):
    """Raised by a job whose attempt did not finish its work: it counts as a failed
    attempt, retried after the kind's backoff or `seconds` if longer (a Retry-After),
    dead when attempts or the deadline run out. `str()` is the error kept."""

    def __init__(self, error: str, *, seconds: float | None = None) -> None:
        super().__init__(error)
        self.seconds = seconds


class Postpone(Exception):
    """Raised by a job that cannot start its work yet (its endpoint is paused): no
    attempt is spent, it runs again after `seconds` or when its line is woken."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"postponed for {seconds} s")
        self.seconds = seconds


@dataclass(frozen=True)
class Policy:
    max_attempts: Setting[int]
    atomic: bool
    # The first pause after a failed attempt (doubling, at most an hour).
    backoff: Setting[float]
    # How long a running job may go without finishing before it is taken to have died.
    lease: Setting[float]
    # Seconds from enqueuing after which a failed attempt is the last (None: none).
    deadline: Setting[float] | None
    # Called with the job, in the transaction that marks it dead.
    on_dead: Callable[[Job], None] | None


def _job_backoff() -> float:
    return float(settings.MEMORYADMIN_JOB_BACKOFF_SECONDS)


def _job_lease() -> float:
    return float(settings.MEMORYADMIN_JOB_LEASE_SECONDS)


def durable(
    *,
    max_attempts: Setting[int] = 5,
    atomic: bool = True,
    backoff: Setting[float] = _job_backoff,
    lease: Setting[float] = _job_lease,
    deadline: Setting[float] | None = None,
    on_dead: Callable[[Job], None] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Marks a function (keyword arguments only, JSON values) as a durable job kind."""
    policy = Policy(max_attempts, atomic, backoff, lease, deadline, on_dead)

    def mark(function: Callable[P, R]) -> Callable[P, R]:
        setattr(function, DURABLE, policy)
        return function

    return mark


def _policy(function: Callable[..., Any]) -> Policy:
    policy = getattr(function, DURABLE, None)
    if not isinstance(policy, Policy):
        raise TypeError(f"{function!r} is not marked @durable")
    return policy


def _path(function: Callable[..., Any]) -> str:
    return f"{function.__module__}.{function.__qualname__}"


def _from_now(seconds: float | timedelta) -> Combinable:
    """The database's time now plus `seconds`, for a statement: due times and leases are
    the database's, whatever the clock of the host writing or reading them."""
    return db_after(seconds)


def _deadline(policy: Policy) -> Combinable | None:
    if policy.deadline is None:
        return None
    return _from_now(_value(policy.deadline))


def enqueue(
    function: Callable[..., Any],
    *,
    project: str,
    key: str = "",
    line: str = "",
    delay: float = 0,
    **kwargs: Any,
) -> Job:
    """Writes a job of `project` ("" for none) in the current transaction; it is handed
    to the backend on commit.

    With a `key`, enqueuing while a job of that key is still open returns
    that job instead of adding another: the one that another transaction enqueued
    at the same time too, and a new one when the open one finished or was removed
    between the conflict and its read (that raised). With a `line`, it runs after
    every earlier job of that line is done or dead.
    """
    policy = _policy(function)
    for tries_left in reversed(range(KEY_TRIES)):
        try:
            with transaction.atomic():
                job = Job.objects.create(
                    name=_path(function),
                    project=project,
                    kwargs=kwargs,
                    key=key,
                    line=line,
                    max_attempts=_value(policy.max_attempts),
                    deadline_at=_deadline(policy),
                    run_after=_from_now(delay),
                )
            break
        except IntegrityError:
            if not key or not tries_left:
                raise
            # Another transaction holds the key open: its job is this one. Gone by the
            # time it is read (finished, or removed, since the INSERT met it), the key
            # is free again: enqueue anew.
            open_job = Job.objects.filter(key=key, state__in=OPEN_STATES).first()
            if open_job is not None:
                return open_job
    if delay <= 0:
        jobs_dispatch_on_commit([job.pk])
    return job


def enqueue_many(
    function: Callable[..., Any], *, project: str, jobs: list[tuple[str, dict[str, Any]]]
) -> list[Job]:
    """Writes one job of `project` per `(line, kwargs)`, in order, in one INSERT of the
    current transaction; they are handed to the backend on commit. The jobs returned
    have their ids; their times, the database's, are not read back (`run_after` and
    `deadline_at` hold the expressions written: refresh a job to read them)."""
    policy = _policy(function)
    rows = Job.objects.bulk_create(
        Job(
            name=_path(function),
            project=project,
            kwargs=kwargs,
            line=line,
            max_attempts=_value(policy.max_attempts),
            deadline_at=_deadline(policy),
            run_after=Now(),
        )
        for line, kwargs in jobs
    )
    jobs_dispatch_on_commit([job.pk for job in rows])
    return rows


def enqueue_dead(function: Callable[..., Any], *, project: str, error: str, **kwargs: Any) -> Job:
    """A job that is dead from the start: work that failed for good before the runner
    took it (its one attempt spent, `error` kept), for owners to run again or discard
    like any dead job."""
    _policy(function)
    now = timezone.now()
    return Job.objects.create(
        name=_path(function),
        project=project,
        kwargs=kwargs,
        state=JobState.DEAD,
        attempts=1,
        max_attempts=1,
        deadline_at=now,
        run_after=now,
        finished_at=now,
        last_error=error[:ERROR_MAX],
    )


def enqueue_sql(
    function: Callable[..., Any],
    *,
    project: str,
    rows: str,
    kwargs: str,
    line: str = "''",
    order: str = "",
    returning: str = "",
    lock: str = "",
) -> tuple[str, list[Any]]:
    """`INSERT INTO <jobs> ... SELECT ... FROM <rows> RETURNING id`: one job of `project`
    per row, for a PostgreSQL statement that also writes the change causing them (a
    `WITH` clause of it). `kwargs` is the SQL of each job's JSON arguments over `rows`,
    `line` of its line, `order` (an ORDER BY) the order of their ids, `returning` more
    columns to return, `lock` a locking clause of the SELECT (`FOR KEY SHARE OF ...`).
    Hand the ids it returns to `jobs_dispatch_on_commit`."""
    policy = _policy(function)
    vendor = database_vendor()
    deadline = _deadline(policy)
    deadline_sql, deadline_params = ("NULL", []) if deadline is None else _sql_of(deadline)
    params = [_path(function), project, JobState.PENDING, _value(policy.max_attempts)]
    params += [*deadline_params, timezone.now()]
    statement = _enqueue_statement(
        vendor, rows, kwargs, line, order, returning, lock, deadline_sql, _now_sql(vendor)
    )
    return statement, params


def _sql_of(expression: Any) -> tuple[str, list[Any]]:
    """An expression's SQL and parameters on the default database."""
    query = Query(Job)
    sql, params = query.get_compiler(DEFAULT_DB_ALIAS).compile(expression.resolve_expression(query))
    return sql, list(params)


@functools.cache
def _now_sql(vendor: str) -> str:
    """The database's time now, in SQL (`Now()`'s: the statement's time)."""
    return _sql_of(Now())[0]


@functools.cache
def _enqueue_statement(
    vendor: str,
    rows: str,
    kwargs: str,
    line: str,
    order: str,
    returning: str,
    lock: str,
    deadline: str,
    now: str,
) -> str:
    """`enqueue_sql`'s statement, the same text for the same arguments: built once."""
    names = ["name", "project", "kwargs", "key", "line", "state", "attempts", "max_attempts"]
    names += ["deadline_at", "run_after", "created_at", "last_error"]
    targets = ", ".join(column(Job, name) for name in names)
    extra = f", {returning}" if returning else ""
    return (
        f"INSERT INTO {table(Job)} ({targets})"
        f" SELECT %s, %s, {kwargs}, '', {line}, %s, 0, %s, {deadline}, {now}, %s, ''"
        f" FROM {rows}"
        f"{f' ORDER BY {order}' if order else ''}"
        f"{f' {lock}' if lock else ''}"
        f" RETURNING {column(Job, 'id')}{extra}"
    )


def jobs_dispatch_on_commit(job_ids: list[int]) -> None:
    """Hands jobs to the backend once their transaction commits."""
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
        Job.objects.filter(pk=job_id).update(dispatched_at=Now())
        try:
            run_job.enqueue(job_id)
        except Exception:
            logger.exception("could not hand job %s to the task backend", job_id)


def _lease() -> timedelta:
    return timedelta(seconds=settings.MEMORYADMIN_JOB_LEASE_SECONDS)


def _waits_in_line() -> Q:
    """A job of a line with an earlier job still open, or another one running under a
    live lease: it waits. A running job whose lease has passed (its worker died) holds
    nothing: an earlier job reopened before it, or committed after it, runs first, and
    the abandoned one is taken over at its turn (the line stalled for good otherwise)."""
    line = Job.objects.filter(NotBlank("line"), line=OuterRef("line"))
    # Two probes of the line's index, each ending at the first row it finds (one with an
    # OR read every open job of the line for each job it checked).
    earlier_open = line.filter(state__in=OPEN_STATES, pk__lt=OuterRef("pk"))
    running = line.filter(state=JobState.RUNNING, lease_until__gte=Now()).exclude(pk=OuterRef("pk"))
    return Q(NotBlank("line")) & (Q(Exists(earlier_open)) | Q(Exists(running)))


def _first_in_lines() -> QuerySet[Any, Any]:
    """The first open job of each line, the only one of its line that can be its turn: a
    sweep asks `_waits_in_line` of these alone, not of every job waiting behind them."""
    return (
        Job.objects.filter(NotBlank("line"), state__in=OPEN_STATES)
        .values("line")
        .annotate(first=Min("pk"))
        .values("first")
    )


def jobs_due() -> list[int]:
    """Jobs the backend should run now and may not have: never handed over, handed
    over a lease ago without a run, or running past their lease (the worker died).
    A job waiting in its line is not due until its turn."""
    pending = Q(state=JobState.PENDING, run_after__lte=Now()) & (
        Q(dispatched_at__isnull=True) | Q(dispatched_at__lt=_from_now(-_lease()))
    )
    abandoned = Q(state=JobState.RUNNING, lease_until__lt=Now())
    due = Job.objects.filter(pending | abandoned)
    # Two halves of one UNION ALL, not one WHERE with an OR: with the OR, PostgreSQL
    # estimated the line check for many due jobs and compiled the statement (JIT).
    unlined = due.filter(line="")
    lined = due.filter(pk__in=_first_in_lines()).exclude(_waits_in_line())
    return [
        pk
        for pk, _ in unlined.values_list("pk", "run_after")
        .union(lined.values_list("pk", "run_after"), all=True)
        .order_by("run_after")[:500]
    ]


def jobs_sweep() -> int:
    """Hands every due job to the backend; the worker calls it between batches."""
    due = jobs_due()
    _dispatch(due)
    return len(due)


def _claim(job_id: int) -> Job | None:
    """The job, claimed (its attempt counted, its lease taken), if it is due, nobody
    holds it and it is its line's turn; None otherwise. A job abandoned in its last
    attempt is not claimed but marked dead (returned as such). Whether it is due, whose
    lease has passed and when the new one ends are the database's time's."""
    job = Job.objects.filter(pk=job_id).annotate(database_now=Now()).first()
    if job is None:
        return None
    claimable = Q(state=JobState.PENDING, run_after__lte=Now()) | Q(
        state=JobState.RUNNING, lease_until__lt=Now()
    )
    rows = Job.objects.filter(claimable, pk=job_id, attempts=job.attempts)
    if job.state == JobState.RUNNING and _last_attempt(job, job.database_now):
        # Its worker died in its last attempt: taken over at its turn, it is dead.
        held = rows.filter(state=JobState.RUNNING).exclude(_waits_in_line())
        return job if _abandoned_dead(job, held) else None
    claimed = _update_returning(
        rows.exclude(_waits_in_line()),
        {
            "state": JobState.RUNNING,
            "attempts": job.attempts + 1,
            "lease_until": _from_now(_kind_lease(job) or _lease()),
        },
        "lease_until",
    )
    if not claimed:
        if job.line:
            # Waiting in its line: the sweep hands it over again once its turn comes.
            Job.objects.filter(pk=job_id, state=JobState.PENDING).update(dispatched_at=None)
        return None
    job.state, job.attempts, job.lease_until = JobState.RUNNING, job.attempts + 1, claimed[0]
    return job


def _update_returning(rows: QuerySet[Job], changes: dict[str, Any], returning: str) -> list[Any]:
    """`rows.update(**changes)`, in the same one statement, with the value of the field
    `returning` of each row it changed as the database wrote it (UPDATE ... RETURNING):
    a time the database decided, which its writer must hold to, without another read
    (PostgreSQL and SQLite both return rows from an UPDATE)."""
    fields = Job._meta
    values = [(fields.get_field(name), None, value) for name, value in changes.items()]
    with transaction.mark_for_rollback_on_error(using=rows.db):
        # Django's own UPDATE ... RETURNING (what `save()` refreshes expressions with).
        returned = rows._update(  # type: ignore[attr-defined]
            values, returning_fields=[fields.get_field(returning)]
        )
    return [row[0] for row in returned]


def _kind_policy(job: Job) -> Policy | None:
    """The policy of the job's kind; None when its name is no durable function."""
    try:
        return _policy(import_string(job.name))
    except (ImportError, TypeError):
        return None


def _kind_lease(job: Job) -> timedelta | None:
    """The job's own lease, when its kind has one other than the runner's."""
    policy = _kind_policy(job)
    if policy is None or policy.lease is _job_lease:
        return None
    return timedelta(seconds=_value(policy.lease))


class _LeaseLost(Exception):
    pass


def _finish(job: Job) -> None:
    finished = _held(job).update(
        state=JobState.DONE, finished_at=timezone.now(), lease_until=None, last_error=""
    )
    if not finished:
        # Another worker took the job over after our lease passed: our work
        # must not count (an atomic job's writes roll back with this).
        raise _LeaseLost()
    _next_in_line(job)


def _next_in_line(job: Job) -> None:
    """A job of a line that ended hands the next one over at once (on commit)."""
    if not job.line:
        return
    following = (
        Job.objects.filter(
            NotBlank("line"), line=job.line, state=JobState.PENDING, run_after__lte=Now()
        )
        .order_by("pk")
        .values_list("pk", flat=True)
        .first()
    )
    if following is not None:
        jobs_dispatch_on_commit([following])


_current: contextvars.ContextVar[Job] = contextvars.ContextVar("current_job")


def current_job() -> Job:
    """The job this code runs in (its attempt, its attempts left): inside a job only."""
    return _current.get()


def _held(job: Job) -> QuerySet[Job]:
    """The job's row while this attempt holds it: running, at this attempt, under the
    lease its claim took (no one took it over after its lease passed). The lease, not
    the number alone: running a job again counts its attempts from 0, and an attempt of
    the earlier run back late counted as the new run's attempt of the same number."""
    return Job.objects.filter(
        pk=job.pk, state=JobState.RUNNING, attempts=job.attempts, lease_until=job.lease_until
    )


def current_claim() -> Exists:
    """A condition, for a statement of the current job, that its attempt still holds the
    job: a job that is not atomic writes its outcome with it, so a worker that comes back
    after another took the job over writes nothing (inside a job only)."""
    return Exists(_held(current_job()))


def job_run(job_id: int) -> str:
    """One attempt: "done", "retry", "postponed", "dead", or "skipped" (not due, waiting
    in its line, or someone else's)."""
    job = _claim(job_id)
    if job is None:
        return "skipped"
    if job.state == JobState.DEAD:
        return "dead"
    policy: Policy | None = None
    token = _current.set(job)
    try:
        function = import_string(job.name)
        policy = _policy(function)
        if policy.atomic:
            with transaction.atomic():
                function(**job.kwargs)
                _finish(job)
        else:
            function(**job.kwargs)
            _finish(job)
    except _LeaseLost:
        return "skipped"
    except Postpone as postponed:
        return _postponed(job, postponed.seconds)
    except Exception as exc:
        return _failed(job, exc, policy)
    finally:
        _current.reset(token)
    return "done"


def _error(exc: BaseException) -> str:
    if isinstance(exc, RetryAfter):
        return str(exc)[:ERROR_MAX]
    return "".join(traceback.format_exception_only(exc)).strip()[:ERROR_MAX]


def _postponed(job: Job, seconds: float) -> str:
    _held(job).update(
        state=JobState.PENDING,
        attempts=F("attempts") - 1,
        run_after=_from_now(seconds),
        lease_until=None,
        dispatched_at=None,
    )
    return "postponed"


def _last_attempt(job: Job, now: Any) -> bool:
    """Its attempts or its deadline ran out by the database's time `now`: one whose
    worker died leaves the job dead (`_LAST` says the same in a statement)."""
    past_deadline = job.deadline_at is not None and now >= job.deadline_at
    return job.attempts >= job.max_attempts or past_deadline


# `_last_attempt` in a statement, of the row it writes.
_LAST = Q(attempts__gte=F("max_attempts")) | Q(deadline_at__lte=Now())


def _ended_dead(job: Job, policy: Policy | None) -> None:
    """In the transaction that marked the job dead: its kind's `on_dead`, then its line's
    next job."""
    if policy is not None and policy.on_dead is not None:
        policy.on_dead(job)
    _next_in_line(job)


def _abandoned_dead(job: Job, rows: QuerySet[Job]) -> bool:
    """Marks dead a job (`rows`: it, still abandoned and its line's turn) whose worker
    died in its last attempt, instead of running it again: a job whose worker kept dying
    was retried without end."""
    now = timezone.now()
    error = f"attempt {job.attempts} did not finish: its worker stopped (its lease passed)"
    with transaction.atomic():
        updated = rows.update(
            state=JobState.DEAD,
            lease_until=None,
            dispatched_at=None,
            last_error=error,
            finished_at=now,
        )
        if not updated:
            return False
        logger.warning("job %s (%s) is dead: %s", job.pk, job.name, error)
        job.state, job.last_error, job.finished_at = JobState.DEAD, error, now
        _ended_dead(job, _kind_policy(job))
    return True


def _failed(job: Job, exc: BaseException, policy: Policy | None) -> str:
    error = _error(exc)
    logger.warning("job %s (%s) attempt %d failed: %s", job.pk, job.name, job.attempts, error)
    base = _value(policy.backoff) if policy is not None else _job_backoff()
    at_least = exc.seconds if isinstance(exc, RetryAfter) else None
    pause = backoff_seconds(base, job.attempts, at_least=at_least)
    now = timezone.now()
    with transaction.atomic():
        # Dead or pending is decided in the statement, by the database's time.
        updated = _update_returning(
            _held(job),
            {
                "state": Case(
                    When(_LAST, then=Value(JobState.DEAD)), default=Value(JobState.PENDING)
                ),
                "run_after": _from_now(pause),
                "lease_until": None,
                "dispatched_at": None,
                "last_error": error,
                "finished_at": Case(
                    When(_LAST, then=Value(now)), default=None, output_field=DateTimeField()
                ),
            },
            "state",
        )
        if not updated:
            return "skipped"
        dead = updated[0] == JobState.DEAD
        if dead:
            job.state, job.last_error, job.finished_at = JobState.DEAD, error, now
            _ended_dead(job, policy)
    return "dead" if dead else "retry"


def job_again(job_id: int) -> bool:
    """Runs a finished job (done, dead or discarded) again from the start: fresh
    attempts and deadline, in its place in its line; says whether it did (an open job
    is left as it is). In the caller's transaction, handed over on commit."""
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return False
    policy = _kind_policy(job)
    if policy is None:
        return False
    reopened = (
        Job.objects.filter(pk=job_id)
        .exclude(state__in=OPEN_STATES)
        .update(
            state=JobState.PENDING,
            attempts=0,
            max_attempts=_value(policy.max_attempts),
            deadline_at=_deadline(policy),
            run_after=Now(),
            lease_until=None,
            dispatched_at=None,
            finished_at=None,
            last_error="",
        )
    )
    if reopened:
        jobs_dispatch_on_commit([job_id])
    return bool(reopened)


def job_discard(job_id: int) -> bool:
    """Sets a dead job aside for good; says whether it was dead."""
    return bool(Job.objects.filter(pk=job_id, state=JobState.DEAD).update(state=JobState.DISCARDED))


def jobs_wake(line: str) -> None:
    """Makes the waiting jobs of a line due now (an endpoint resumed): handed over on
    commit, the first of them runs."""
    waiting = Job.objects.filter(NotBlank("line"), line=line, state=JobState.PENDING)
    waiting.update(run_after=Now(), dispatched_at=None)
    jobs_dispatch_on_commit(list(waiting.order_by("pk").values_list("pk", flat=True)[:1]))


def jobs_run_due(limit: int = 100) -> dict[str, int]:
    """Runs due jobs in this process (tests, and a worker without a backend queue):
    each at most once per call, a line's next job once the one before it has ended."""
    counts: dict[str, int] = {}
    ran: set[int] = set()
    while len(ran) < limit:
        due = [job_id for job_id in jobs_due() if job_id not in ran][: limit - len(ran)]
        if not due:
            break
        for job_id in due:
            ran.add(job_id)
            outcome = _runner[-1](job_id) if _runner else job_run(job_id)
            counts[outcome] = counts.get(outcome, 0) + 1
    return counts
