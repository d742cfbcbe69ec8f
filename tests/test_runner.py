"""Durable background jobs: the outbox, attempts, backoff, dead jobs, and real worker processes."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from django.db import IntegrityError, connection, connections, transaction
from django.db.models.functions import Now
from django.utils import timezone
from hypothesis import strategies as st

from memoryadmin.memory.models import AuditEntry
from memoryadmin.runner import jobs
from memoryadmin.runner.jobs import (
    Postpone,
    RetryAfter,
    current_job,
    durable,
    enqueue,
    job_again,
    job_discard,
    job_run,
    jobs_due,
    jobs_run_due,
    jobs_wake,
)
from memoryadmin.runner.models import OPEN_STATES, Job, JobState
from tests.helpers import (
    is_postgres,
    manage,
    run_threads,
    suite_database_url,
    wait_until,
    worker_start,
    worker_stop,
    worker_stopped,
)

CALLS: list[dict[str, Any]] = []


@durable(max_attempts=2)
def record(*, label: str, fail: bool = False) -> None:
    AuditEntry.objects.create(project_id=None, environment="", actor="t", action=label)
    CALLS.append({"label": label})
    if fail:
        raise RuntimeError(f"{label} failed")


# What a job kind with a line, a policy and a dead hook did: (label, attempt) per run.
RUNS: list[tuple[str, int]] = []
# Labels that fail (RetryAfter, with their seconds) / postpone, until removed.
FAILING: dict[str, float | None] = {}
POSTPONED: set[str] = set()


def _buried(job: Job) -> None:
    # In the transaction that marks the job dead: rolled back with it.
    AuditEntry.objects.create(
        project_id=None, environment="", actor="t", action=f"dead:{job.kwargs['label']}"
    )


@durable(max_attempts=3, atomic=False, backoff=60, deadline=3600, lease=7, on_dead=_buried)
def lined(*, label: str) -> None:
    assert current_job().kwargs == {"label": label}
    if label in POSTPONED:
        raise Postpone(600)
    RUNS.append((label, current_job().attempts))
    if label in FAILING:
        raise RetryAfter(f"{label} not yet", seconds=FAILING[label])


def not_durable(*, label: str) -> None:
    raise AssertionError("never run")


@pytest.fixture(autouse=True)
def _no_calls(settings: Any) -> Iterator[None]:
    settings.MEMORYADMIN_JOB_BACKOFF_SECONDS = 0
    CALLS.clear()
    RUNS.clear()
    FAILING.clear()
    POSTPONED.clear()
    GATES.clear()
    STARTED.clear()
    yield
    CALLS.clear()


# The outbox, in this process.


@pytest.mark.django_db(transaction=True)
def test_a_job_of_a_rolled_back_change_is_never_written() -> None:
    def change() -> None:
        with transaction.atomic():
            enqueue(record, project="", label="rolled-back")
            raise RuntimeError("the change fails")

    with pytest.raises(RuntimeError):
        change()
    assert not Job.objects.exists()
    assert jobs_run_due() == {}


@pytest.mark.django_db
def test_a_committed_job_runs_once_and_is_done() -> None:
    job = enqueue(record, project="", label="once")
    assert (job.state, job.attempts, job.name) == ("pending", 0, "tests.test_runner.record")
    assert jobs_run_due() == {"done": 1}
    assert job_run(job.pk) == "skipped"
    job.refresh_from_db()
    assert (job.state, job.attempts, job.last_error) == ("done", 1, "")
    assert AuditEntry.objects.filter(action="once").count() == 1


@pytest.mark.django_db
def test_one_open_job_per_key() -> None:
    first = enqueue(record, project="", key="sync:acme", label="keyed")
    again = enqueue(record, project="", key="sync:acme", label="keyed")
    assert again.pk == first.pk
    assert Job.objects.count() == 1
    jobs_run_due()
    assert enqueue(record, project="", key="sync:acme", label="keyed").pk != first.pk


class _KeyRace:
    """A connection's wrapper that lets something happen between a keyed enqueue's INSERT,
    refused by the open job of its key, and its read of that job: `between()` runs before
    the first read of the jobs after the first refused INSERT."""

    def __init__(self, between: Callable[[], object]) -> None:
        self.between = between
        self.refused = False
        self.done = False

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        table = '"runner_job"'
        if self.refused and not self.done and sql.startswith("SELECT") and table in sql:
            self.done = True
            self.between()
        try:
            return execute(sql, params, many, context)
        except IntegrityError:
            if sql.startswith("INSERT") and table in sql:
                self.refused = True
            raise


@pytest.mark.django_db
@pytest.mark.parametrize("gone", ["done", "removed"])
def test_a_keyed_job_gone_between_the_conflict_and_its_read_is_enqueued_anew(gone: str) -> None:
    """The open job of the key finished (or was removed) after the INSERT met it and
    before it was read: `Job.DoesNotExist` escaped from enqueue."""
    first = enqueue(record, project="", key="sync:acme", label="keyed")
    rows = Job.objects.filter(pk=first.pk)
    race = _KeyRace(lambda: rows.update(state="done") if gone == "done" else rows.delete())
    with connection.execute_wrapper(race):
        again = enqueue(record, project="", key="sync:acme", label="keyed")
    assert race.done
    assert again.pk != first.pk
    assert list(Job.objects.filter(key="sync:acme", state__in=OPEN_STATES)) == [again]
    assert again.state == "pending"
    assert list(Job.objects.filter(pk=first.pk).values_list("state", flat=True)) == (
        ["done"] if gone == "done" else []
    )


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_keyed_enqueues_at_once_whose_open_job_finishes_meanwhile_share_one_new_job() -> None:
    """Four transactions enqueue one key at once, each meeting its open job; it finishes
    before any of them reads it (held there until it has): each enqueues anew, one
    inserts, the others wait for it and return its job. Each raised DoesNotExist."""
    first = enqueue(record, project="", key="sync:acme", label="keyed")
    refused = threading.Semaphore(0)
    finished = threading.Event()

    def between() -> None:
        refused.release()
        assert finished.wait(30)

    def enqueue_at_once(index: int) -> int:
        with connection.execute_wrapper(_KeyRace(between)), transaction.atomic():
            return enqueue(record, project="", key="sync:acme", label="keyed").pk

    results: list[Any] = []
    racing = threading.Thread(target=lambda: results.extend(run_threads(4, enqueue_at_once)))
    racing.start()
    for _ in range(4):
        assert refused.acquire(timeout=30), "every enqueue to meet the open job"
    Job.objects.filter(pk=first.pk).update(state="done")
    finished.set()
    racing.join(60)
    [again] = Job.objects.filter(key="sync:acme", state__in=OPEN_STATES)
    assert results == [again.pk] * 4
    assert again.pk != first.pk
    assert Job.objects.filter(key="sync:acme").count() == 2


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_keyed_enqueues_at_once_share_one_job() -> None:
    def enqueue_at_once(index: int) -> int:
        with transaction.atomic():
            return enqueue(record, project="", key="sync:acme", label=f"keyed {index}").pk

    results = run_threads(8, enqueue_at_once)
    [job] = Job.objects.filter(key="sync:acme")
    assert results == [job.pk] * 8


@pytest.mark.django_db
def test_a_failed_attempt_rolls_back_its_writes_and_is_retried_then_dead() -> None:
    job = enqueue(record, project="", label="failing", fail=True)
    assert jobs_run_due() == {"retry": 1}
    job.refresh_from_db()
    assert (job.state, job.attempts) == ("pending", 1)
    assert "RuntimeError: failing failed" in job.last_error
    assert not AuditEntry.objects.filter(action="failing").exists()
    assert jobs_run_due() == {"dead": 1}
    job.refresh_from_db()
    assert (job.state, job.attempts, job.finished_at is not None) == ("dead", 2, True)
    assert jobs_run_due() == {}
    assert len(CALLS) == 2


@pytest.mark.django_db
def test_a_retry_waits_for_its_backoff(settings: Any) -> None:
    settings.MEMORYADMIN_JOB_BACKOFF_SECONDS = 60
    job = enqueue(record, project="", label="later", fail=True)
    assert jobs_run_due() == {"retry": 1}
    job.refresh_from_db()
    assert timedelta(seconds=55) < job.run_after - timezone.now() <= timedelta(seconds=60)
    assert jobs_due() == []


@pytest.mark.django_db
def test_a_running_job_past_its_lease_is_run_again_and_a_late_finish_does_not_count() -> None:
    job = enqueue(record, project="", label="abandoned")
    past = timezone.now() - timedelta(seconds=1)
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, attempts=1, lease_until=past)
    assert jobs_due() == [job.pk]
    assert job_run(job.pk) == "done"
    job.refresh_from_db()
    assert (job.state, job.attempts) == ("done", 2)
    # The first attempt's worker, coming back late, cannot mark it again.
    job.attempts = 1
    with pytest.raises(jobs._LeaseLost):
        jobs._finish(job)


@pytest.mark.django_db
def test_only_durable_functions_run() -> None:
    job = Job.objects.create(
        name="tests.test_runner.not_durable", kwargs={"label": "x"}, run_after=timezone.now()
    )
    assert job_run(job.pk) == "retry"
    job.refresh_from_db()
    assert "is not marked @durable" in job.last_error
    with pytest.raises(TypeError):
        enqueue(not_durable, project="", label="x")


# Job kinds: lines, policies, RetryAfter, Postpone, dead hooks, running again.


def _due_now(*jobs_: Job) -> None:
    Job.objects.filter(pk__in=[job.pk for job in jobs_], state="pending").update(
        run_after=timezone.now()
    )


# What each job looks like to the sweep: (line, state, due or not yet, handed over).
_JOB_SHAPES = st.tuples(
    st.sampled_from(["", "a", "b"]),
    st.sampled_from([JobState.PENDING, JobState.RUNNING, JobState.DONE, JobState.DEAD]),
    st.booleans(),
    st.sampled_from([None, "recently", "a lease ago"]),
)


@pytest.mark.django_db
@hypothesis.settings(max_examples=15, deadline=None, derandomize=True, database=None)
@hypothesis.given(st.lists(_JOB_SHAPES, max_size=12))
def test_the_sweep_hands_over_exactly_the_due_jobs_whose_turn_it_is(
    shapes: list[tuple[str, str, bool, str | None]],
) -> None:
    """The sweep asks whether a job waits in its line of the first open job of each line
    only: it finds what asking every due job finds. The rule, restated: a job is due if it
    is pending, its time has come and it was never handed over or a lease ago, or if it
    runs past its lease; a job of a line waits while an earlier job of its line is open or
    another one runs under a live lease."""
    Job.objects.all().delete()
    now = timezone.now()
    lease = jobs._lease()
    made = []
    for line, state, due, handed in shapes:
        made.append(
            Job.objects.create(
                name="tests.test_runner.record",
                line=line,
                state=state,
                run_after=now - timedelta(seconds=1) if due else now + timedelta(hours=1),
                lease_until=now - timedelta(seconds=1) if due else now + timedelta(hours=1),
                dispatched_at={
                    None: None,
                    "recently": now,
                    "a lease ago": now - lease - timedelta(seconds=1),
                }[handed],
            )
        )

    def lease_of(job: Job) -> datetime:
        assert job.lease_until is not None, job  # a running job holds a lease
        return job.lease_until

    def candidate(job: Job) -> bool:
        if job.state == JobState.RUNNING:
            return lease_of(job) < now
        stale = job.dispatched_at is None or job.dispatched_at < now - lease
        return job.state == JobState.PENDING and job.run_after <= now and stale

    def waits(job: Job) -> bool:
        same = [other for other in made if job.line and other.line == job.line]
        earlier = any(o.state in OPEN_STATES and o.pk < job.pk for o in same)
        running = [o for o in same if o.state == JobState.RUNNING and lease_of(o) >= now]
        return earlier or any(o.pk != job.pk for o in running)

    expected = [job for job in made if candidate(job) and not waits(job)]
    assert sorted(jobs_due()) == sorted(job.pk for job in expected)


@pytest.mark.django_db
def test_a_lines_jobs_run_one_at_a_time_in_order_and_a_failing_one_holds_the_line() -> None:
    FAILING["a"] = None
    first, second = (enqueue(lined, project="p", line="l", label=x) for x in "ab")
    other = enqueue(lined, project="p", line="m", label="c")
    # The second waits for the first; another line does not.
    assert jobs_due() == [first.pk, other.pk]
    assert job_run(second.pk) == "skipped"
    assert jobs_run_due() == {"retry": 1, "done": 1}
    first.refresh_from_db()
    # Retried after the kind's 60 s backoff, the line held meanwhile.
    assert (first.state, first.attempts, first.last_error) == ("pending", 1, "a not yet")
    assert timedelta(seconds=55) < first.run_after - timezone.now() <= timedelta(seconds=60)
    _due_now(second)
    assert jobs_due() == []
    assert job_run(second.pk) == "skipped"
    del FAILING["a"]
    _due_now(first)
    # Once the first is done, the second runs in the same round.
    assert jobs_run_due() == {"done": 2}
    assert RUNS == [("a", 1), ("c", 1), ("a", 2), ("b", 1)]


@pytest.mark.django_db
def test_a_job_running_in_its_line_holds_it_even_behind_a_later_one() -> None:
    first, second = (enqueue(lined, project="p", line="l", label=x) for x in "ab")
    Job.objects.filter(pk=first.pk).update(state="done")
    Job.objects.filter(pk=second.pk).update(
        state="running", lease_until=timezone.now() + timedelta(seconds=60)
    )
    # The first, run again, waits while the second is running.
    assert job_again(first.pk)
    assert job_run(first.pk) == "skipped"
    Job.objects.filter(pk=second.pk).update(state="done")
    assert job_run(first.pk) == "done"


@pytest.mark.django_db
def test_a_later_job_whose_worker_died_holds_its_line_no_longer() -> None:
    """The later job of a line is running when its worker dies while an earlier one is
    open (reopened in its place, or committed after it): the earlier one waited for the
    running one and the running one for the earlier one, and the line stalled for good."""
    first, second = (enqueue(lined, project="p", line="l", label=x) for x in "ab")
    Job.objects.filter(pk=first.pk).update(state="done")
    Job.objects.filter(pk=second.pk).update(
        state="running", attempts=1, lease_until=timezone.now() - timedelta(seconds=1)
    )
    assert job_again(first.pk)
    third = enqueue(lined, project="p", line="l", label="c")
    # The earlier job is the line's turn; the abandoned one is taken over after it.
    assert jobs_due() == [first.pk]
    assert job_run(second.pk) == "skipped"
    assert jobs_run_due() == {"done": 3}
    assert RUNS == [("a", 1), ("b", 2), ("c", 1)]
    states = Job.objects.order_by("pk").values_list("pk", "state", "attempts")
    assert list(states) == [(first.pk, "done", 1), (second.pk, "done", 2), (third.pk, "done", 1)]


@pytest.mark.django_db
def test_retry_after_is_honoured_and_the_last_attempt_is_dead_with_its_hook() -> None:
    FAILING["a"] = 600
    job = enqueue(lined, project="p", line="l", label="a")
    later = enqueue(lined, project="p", line="l", label="b")
    assert job.max_attempts == 3
    assert job_run(job.pk) == "retry"
    job.refresh_from_db()
    # Not the 60 s backoff: the 600 s the job asked for.
    assert timedelta(seconds=595) < job.run_after - timezone.now() <= timedelta(seconds=600)
    for attempt in (2, 3):
        _due_now(job)
        assert job_run(job.pk) == ("retry" if attempt == 2 else "dead")
    job.refresh_from_db()
    assert (job.state, job.attempts, job.last_error) == ("dead", 3, "a not yet")
    assert AuditEntry.objects.filter(action="dead:a").count() == 1
    # A dead job no longer holds its line.
    assert jobs_run_due() == {"done": 1}
    assert RUNS[-1] == ("b", 1)
    later.refresh_from_db()
    assert later.state == "done"


@pytest.mark.django_db
def test_a_job_whose_worker_died_in_its_last_attempt_is_dead_not_run_again() -> None:
    """Taking over an abandoned job ignored its attempts: a job whose worker kept dying
    ran without end. Taken over at its turn with none left, it is dead, with its hook,
    and its line moves on."""
    job = enqueue(lined, project="p", line="l", label="a")
    later = enqueue(lined, project="p", line="l", label="b")
    past = timezone.now() - timedelta(seconds=1)
    Job.objects.filter(pk=job.pk).update(state="running", attempts=3, lease_until=past)
    assert jobs_due() == [job.pk]
    assert job_run(job.pk) == "dead"
    job.refresh_from_db()
    assert (job.state, job.attempts, job.lease_until) == ("dead", 3, None)
    assert job.last_error == "attempt 3 did not finish: its worker stopped (its lease passed)"
    assert job.finished_at is not None
    assert AuditEntry.objects.filter(action="dead:a").count() == 1
    assert jobs_run_due() == {"done": 1}
    assert RUNS == [("b", 1)]
    assert Job.objects.get(pk=later.pk).state == "done"
    # With attempts left, it is taken over and run.
    assert job_again(job.pk)
    Job.objects.filter(pk=job.pk).update(state="running", attempts=2, lease_until=past)
    assert job_run(job.pk) == "done"
    assert Job.objects.filter(pk=job.pk, state="done", attempts=3).exists()


@pytest.mark.django_db
def test_past_its_deadline_a_failed_attempt_is_the_last() -> None:
    FAILING["a"] = None
    job = enqueue(lined, project="p", label="a")
    assert job.deadline_at is not None
    assert timedelta(seconds=3595) < job.deadline_at - timezone.now() <= timedelta(seconds=3600)
    Job.objects.filter(pk=job.pk).update(deadline_at=timezone.now() - timedelta(seconds=1))
    assert jobs_run_due() == {"dead": 1}
    job.refresh_from_db()
    assert (job.state, job.attempts, job.max_attempts) == ("dead", 1, 3)
    assert AuditEntry.objects.filter(action="dead:a").exists()


@pytest.mark.django_db
def test_a_postponed_job_spends_no_attempt_and_a_woken_line_runs_at_once() -> None:
    POSTPONED.add("a")
    job = enqueue(lined, project="p", line="l", label="a")
    assert jobs_run_due() == {"postponed": 1}
    job.refresh_from_db()
    assert (job.state, job.attempts) == ("pending", 0)
    assert job.run_after - timezone.now() > timedelta(seconds=590)
    POSTPONED.clear()
    jobs_wake("l")
    assert jobs_run_due() == {"done": 1}
    assert RUNS == [("a", 1)]


@pytest.mark.django_db
def test_a_kinds_lease_is_its_own() -> None:
    job = enqueue(lined, project="p", label="a")
    Job.objects.filter(pk=job.pk).update(
        state="running", attempts=1, lease_until=timezone.now() - timedelta(seconds=1)
    )
    claimed = jobs._claim(job.pk)
    assert claimed is not None
    assert claimed.lease_until is not None
    assert timedelta(seconds=6) < claimed.lease_until - timezone.now() <= timedelta(seconds=7)


@pytest.mark.django_db
def test_a_dead_job_is_run_again_from_the_start_or_discarded() -> None:
    FAILING["a"] = None
    job = enqueue(lined, project="p", label="a")
    for _ in range(3):
        _due_now(job)
        jobs_run_due()
    job.refresh_from_db()
    assert job.state == "dead"
    del FAILING["a"]
    assert job_again(job.pk)
    assert not job_again(job.pk)  # open: left as it is
    job.refresh_from_db()
    assert (job.state, job.attempts, job.last_error, job.finished_at) == ("pending", 0, "", None)
    assert jobs_run_due() == {"done": 1}
    assert not job_discard(job.pk)  # done, not dead
    FAILING["a"] = None
    assert job_again(job.pk)
    for _ in range(3):
        _due_now(job)
        jobs_run_due()
    assert job_discard(job.pk)
    job.refresh_from_db()
    assert job.state == "discarded"
    assert jobs_run_due() == {}


# Attempts of `gated` that wait for their gate before they go on: the first call takes the
# first gate, and so on; a call with none left goes on at once.
GATES: list[threading.Event] = []
# (label, attempt) of each call of `gated` as it starts.
STARTED: list[tuple[str, int]] = []


@durable(max_attempts=3, atomic=False)
def gated(*, label: str) -> None:
    gate = GATES.pop(0) if GATES else None
    STARTED.append((label, current_job().attempts))
    if gate is not None:
        assert gate.wait(60)
    if label in FAILING:
        raise RetryAfter(f"{label} failed late")


@pytest.mark.django_db(transaction=True)
def test_an_attempt_of_an_earlier_run_back_late_counts_for_nothing() -> None:
    """A worker stalled past its lease in the first attempt; another one took the job over
    and finished it; an owner ran it again, and a third worker is in its first attempt when
    the first comes back. An attempt was told by its number alone, which running again
    counts from 0: the stalled one, failing late, counted as the running one's (the job
    back to pending, to run a third time), and the running one's own end was lost."""
    job = enqueue(gated, project="p", label="a")
    first_gate, third_gate = threading.Event(), threading.Event()
    GATES.append(first_gate)
    outcomes: dict[str, str] = {}

    def attempt(name: str) -> None:
        try:
            outcomes[name] = job_run(job.pk)
        finally:
            connections.close_all()

    stalled = threading.Thread(target=attempt, args=("stalled",))
    stalled.start()
    wait_until(lambda: len(STARTED) == 1, "the first attempt to start")
    # Its lease passes; another worker takes the job over and finishes it.
    Job.objects.filter(pk=job.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    assert job_run(job.pk) == "done"
    assert job_again(job.pk)
    GATES.append(third_gate)
    running = threading.Thread(target=attempt, args=("running",))
    running.start()
    wait_until(lambda: len(STARTED) == 3, "the run again to start")
    assert STARTED == [("a", 1), ("a", 2), ("a", 1)]
    # The stalled worker comes back and fails; then the running one ends.
    FAILING["a"] = None
    first_gate.set()
    stalled.join(60)
    del FAILING["a"]
    third_gate.set()
    running.join(60)
    assert outcomes == {"stalled": "skipped", "running": "done"}
    job.refresh_from_db()
    assert (job.state, job.attempts, job.last_error) == ("done", 1, "")
    assert len(STARTED) == 3


# Worker hosts whose clocks differ: `host_clock(offset)` moves the Python clock
# (`timezone.now`, where the runner would read the host's time) of this thread alone.
_HOST_OFFSET = threading.local()


@pytest.fixture
def host_clock(monkeypatch: pytest.MonkeyPatch) -> Callable[[timedelta], Any]:
    real_now = timezone.now

    def now() -> Any:
        return real_now() + getattr(_HOST_OFFSET, "offset", timedelta(0))

    monkeypatch.setattr(timezone, "now", now)

    @contextmanager
    def moved(offset: timedelta) -> Iterator[None]:
        _HOST_OFFSET.offset = offset
        try:
            yield
        finally:
            _HOST_OFFSET.offset = timedelta(0)

    return moved


HOUR = timedelta(hours=1)


@pytest.mark.django_db(transaction=True)
def test_a_worker_whose_clock_is_ahead_takes_over_no_lease_still_running_by_the_database(
    host_clock: Callable[[timedelta], Any],
) -> None:
    """One worker runs a job under its lease (300 s); another host's clock is an hour
    ahead, so on it the lease has passed. It took the job over, and the job ran twice at
    once (a webhook sent twice); by the database's clock the lease still runs."""
    job = enqueue(gated, project="p", label="a")
    GATES.append(threading.Event())
    gate = GATES[0]
    outcomes: dict[str, Any] = {}

    def worker(name: str, offset: timedelta, work: Callable[[], Any]) -> threading.Thread:
        def run() -> None:
            try:
                with host_clock(offset):
                    outcomes[name] = work()
            finally:
                connections.close_all()

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    holder = worker("holder", timedelta(0), lambda: job_run(job.pk))
    wait_until(lambda: len(STARTED) == 1, "the first attempt to start")
    ahead = worker("ahead", HOUR, lambda: (jobs_due(), job_run(job.pk)))
    ahead.join(60)
    assert outcomes["ahead"] == ([], "skipped")
    assert STARTED == [("a", 1)]
    row = Job.objects.get(pk=job.pk)
    assert (row.state, row.attempts) == ("running", 1)
    assert row.lease_until is not None
    assert timedelta(seconds=290) < row.lease_until - timezone.now() <= timedelta(seconds=300)
    gate.set()
    holder.join(60)
    assert outcomes["holder"] == "done"
    row.refresh_from_db()
    assert (row.state, row.attempts, row.last_error) == ("done", 1, "")
    assert STARTED == [("a", 1)]


@pytest.mark.django_db
def test_a_worker_whose_clock_is_behind_takes_over_a_lease_passed_by_the_database(
    host_clock: Callable[[timedelta], Any],
) -> None:
    """A lease that has passed by the database's clock is taken over, by a worker whose
    clock is an hour behind too (on its clock the lease ran on, and the job stayed with
    its dead worker)."""
    job = enqueue(record, project="", label="abandoned")
    Job.objects.filter(pk=job.pk).update(
        state=JobState.RUNNING, attempts=1, lease_until=Now() - timedelta(seconds=1)
    )
    with host_clock(-HOUR):
        assert jobs_due() == [job.pk]
        assert job_run(job.pk) == "done"
    job.refresh_from_db()
    assert (job.state, job.attempts) == ("done", 2)
    assert [c["label"] for c in CALLS] == ["abandoned"]


@pytest.mark.django_db
def test_when_a_job_is_due_is_the_databases_time_whatever_the_clock_of_its_hosts(
    host_clock: Callable[[timedelta], Any],
) -> None:
    """A job written by a host whose clock is ahead is due at once; a retry waits for its
    backoff by the database's clock, on a worker whose clock is ahead too; a postponed
    job written by a host behind waits its whole pause."""
    with host_clock(HOUR):
        now_job = enqueue(record, project="", label="now")
    assert now_job.run_after is not None
    assert abs(now_job.run_after - timezone.now()) < timedelta(seconds=5)
    with host_clock(-HOUR):
        assert jobs_due() == [now_job.pk]
        assert job_run(now_job.pk) == "done"
    later = enqueue(lined, project="", label="later")
    FAILING["later"] = None
    with host_clock(-HOUR):
        assert job_run(later.pk) == "retry"
    later.refresh_from_db()
    # The kind's backoff (60 s) from the database's time, not from the worker's.
    assert timedelta(seconds=55) < later.run_after - timezone.now() <= timedelta(seconds=60)
    with host_clock(HOUR):
        assert jobs_due() == []
        assert job_run(later.pk) == "skipped"
    POSTPONED.add("paused")
    paused = enqueue(lined, project="", label="paused")
    with host_clock(-HOUR):
        assert job_run(paused.pk) == "postponed"
    paused.refresh_from_db()
    assert timedelta(seconds=590) < paused.run_after - timezone.now() <= timedelta(seconds=600)
    assert RUNS == [("later", 1)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("lease", ["running", "passed"])
def test_workers_whose_clocks_differ_at_once_agree_on_who_holds_a_job(
    host_clock: Callable[[timedelta], Any], lease: str
) -> None:
    """Four workers, their clocks from an hour behind to an hour ahead, claim one running
    job at once: none takes over a lease the database says still runs, exactly one a
    lease it says has passed."""
    job = enqueue(record, project="", label="held")
    until = Now() + timedelta(seconds=120 if lease == "running" else -1)
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, attempts=1, lease_until=until)
    offsets = [-HOUR, -HOUR / 2, HOUR / 2, HOUR]

    def claim(index: int) -> bool:
        with host_clock(offsets[index]):
            return jobs._claim(job.pk) is not None

    claimed = run_threads(4, claim)
    job.refresh_from_db()
    if lease == "running":
        assert claimed == [False] * 4
        assert (job.state, job.attempts) == ("running", 1)
    else:
        assert claimed.count(True) == 1
        assert (job.state, job.attempts) == ("running", 2)
        assert job.lease_until is not None
        assert timedelta(seconds=290) < job.lease_until - timezone.now() <= timedelta(seconds=300)


# Housekeeping (memoryadmin/runner/housekeeping.py).

RESULTS = "finished task results"


def _task_result(status: str, finished_hours_ago: float | None) -> Any:
    from django_tasks_db.models import DBTaskResult

    now = timezone.now()
    finished = None if finished_hours_ago is None else now - timedelta(hours=finished_hours_ago)
    return DBTaskResult.objects.create(
        status=status,
        finished_at=finished,
        args_kwargs={"args": [1], "kwargs": {}},
        task_path="memoryadmin.runner.jobs.run_job",
        backend_name="default",
        run_after=now - timedelta(hours=30),
    )


@pytest.mark.django_db
def test_housekeeping_removes_finished_task_results_past_their_hours_in_batches(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_tasks_db.models import DBTaskResult

    from memoryadmin.runner import housekeeping

    monkeypatch.setattr(housekeeping, "BATCH", 2)
    gone = [_task_result(state, 25) for state in ["SUCCESSFUL"] * 4 + ["FAILED"]]
    # A result whose task has not finished is kept however long ago it was enqueued.
    kept = [
        _task_result("SUCCESSFUL", 23),
        _task_result("READY", None),
        _task_result("RUNNING", None),
    ]
    assert housekeeping.housekeeping() == housekeeping.Swept({RESULTS: len(gone)})
    assert set(DBTaskResult.objects.values_list("pk", flat=True)) == {r.pk for r in kept}
    settings.MEMORYADMIN_TASK_RESULTS_KEEP_HOURS = 22
    assert housekeeping.housekeeping().removed == {RESULTS: 1}
    assert set(DBTaskResult.objects.values_list("status", flat=True)) == {"READY", "RUNNING"}


@pytest.mark.django_db
def test_housekeeping_stops_at_its_budget_and_goes_on_at_the_next_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A backlog (an upgrade's, say) is removed a budget at a time, the worker's jobs run
    between the calls."""
    from django_tasks_db.models import DBTaskResult

    from memoryadmin.runner import housekeeping

    monkeypatch.setattr(housekeeping, "BATCH", 2)
    for _ in range(5):
        _task_result("SUCCESSFUL", 25)
    assert housekeeping.housekeeping(budget=0) == housekeeping.Swept({RESULTS: 2}, done=False)
    assert DBTaskResult.objects.count() == 3
    assert housekeeping.housekeeping(budget=0) == housekeeping.Swept({RESULTS: 2}, done=False)
    # The last of them, then no other kind of row: its budget is spent.
    assert housekeeping.housekeeping(budget=0) == housekeeping.Swept({RESULTS: 1}, done=False)
    # Kinds with nothing due cost no budget: the next call goes through them all.
    assert housekeeping.housekeeping(budget=0) == housekeeping.Swept({}, done=True)
    assert not DBTaskResult.objects.exists()


@pytest.mark.django_db
def test_housekeeping_ends_expired_sessions_and_keeps_live_ones(
    people: Any, web_client_for: Any
) -> None:
    from django.contrib.sessions.models import Session

    from memoryadmin.runner.housekeeping import housekeeping

    owner = web_client_for(people.owner)
    expired = web_client_for(people.support)
    Session.objects.filter(session_key=expired.session.session_key).update(
        expire_date=timezone.now() - timedelta(seconds=1)
    )
    assert housekeeping().removed == {"expired sessions": 1}
    assert list(Session.objects.values_list("session_key", flat=True)) == [
        owner.session.session_key
    ]
    assert owner.get("/projects/acme/development/").status_code == 200
    assert expired.get("/projects/acme/development/").status_code == 302


def _finished_job(state: str, days: float, **kwargs: Any) -> Job:
    """A job of `record` that ended (`state`) `days` ago."""
    job = enqueue(record, project="acme", label=f"{state}-{days}", **kwargs)
    ended = timezone.now() - timedelta(days=days)
    Job.objects.filter(pk=job.pk).update(state=state, finished_at=ended, run_after=ended)
    return job


@pytest.mark.django_db
def test_finished_jobs_nothing_refers_to_go_after_their_days_and_open_ones_never(
    settings: Any, notes: Any
) -> None:
    from memoryadmin.agents.models import ProviderOperation
    from memoryadmin.agents.services.operations import operation_dead_letter
    from memoryadmin.runner.housekeeping import housekeeping

    gone = [_finished_job(state, 31) for state in ("done", "dead", "discarded")]
    recent = _finished_job("done", 29)
    waiting = enqueue(record, project="acme", label="waiting", delay=3600)
    running = enqueue(record, project="acme", label="running")
    long_ago = timezone.now() - timedelta(days=90)
    Job.objects.filter(pk=waiting.pk).update(run_after=long_ago, created_at=long_ago)
    Job.objects.filter(pk=running.pk).update(state="running", created_at=long_ago)
    # A dead letter's job, dead long ago: its operation waits for an owner, and keeps it.
    letter = operation_dead_letter(
        resource=notes,
        namespace="",
        principal="owner:alice",
        kind="erasure_delete",
        action="delete",
        record_id="xm_1",
        error="the provider refused",
    )
    assert letter.job_id is not None
    Job.objects.filter(pk=letter.job_id).update(finished_at=long_ago)
    ProviderOperation.objects.filter(pk=letter.pk).update(updated_at=long_ago)

    settings.MEMORYADMIN_JOBS_KEEP_DAYS = 0  # for ever
    assert housekeeping().removed == {}
    settings.MEMORYADMIN_JOBS_KEEP_DAYS = 30
    # Never before the records that could refer to them go: kept while those are.
    settings.MEMORYADMIN_WEBHOOK_DELIVERIES_KEEP_DAYS = 0
    assert housekeeping().removed == {}
    settings.MEMORYADMIN_WEBHOOK_DELIVERIES_KEEP_DAYS = 30
    settings.MEMORYADMIN_OPERATIONS_KEEP_DAYS = 45
    assert housekeeping().removed == {}
    settings.MEMORYADMIN_OPERATIONS_KEEP_DAYS = 30
    assert housekeeping().removed == {"finished jobs": len(gone)}
    kept = {recent.pk, waiting.pk, running.pk, letter.job_id}
    assert set(Job.objects.values_list("pk", flat=True)) == kept
    assert ProviderOperation.objects.get(pk=letter.pk).state == "dead"
    assert housekeeping().removed == {}


@pytest.mark.parametrize(
    ("name", "raw", "says"),
    [
        ("MEMORYADMIN_JOBS_KEEP_DAYS", "-1", "must be at least 0, not -1"),
        ("MEMORYADMIN_WEBHOOK_DELIVERIES_KEEP_DAYS", "3651", "must be at most 3650, not 3651"),
        ("MEMORYADMIN_OPERATIONS_KEEP_DAYS", "a month", "must be an integer, not 'a month'"),
    ],
)
def test_days_to_keep_out_of_their_range_are_refused_at_start_up(
    name: str, raw: str, says: str
) -> None:
    done = manage("check", env={**os.environ, "MEMORYADMIN_DEV_SECRETS": "1", name: raw})
    assert done.returncode != 0
    assert f"{name} {says}" in done.stderr


@pytest.mark.parametrize(
    ("name", "raw", "says"),
    [
        ("MEMORYADMIN_JOB_BACKOFF_SECONDS", "-5", "must be at least 0, not -5"),
        ("MEMORYADMIN_WEBHOOK_BACKOFF_SECONDS", "-0.5", "must be at least 0, not -0.5"),
        ("MEMORYADMIN_OPERATION_BACKOFF_SECONDS", "-1", "must be at least 0, not -1"),
        ("MEMORYADMIN_WEBHOOK_TIMEOUT_SECONDS", "-20", "must be at least 1, not -20"),
    ],
)
def test_pauses_and_timeouts_below_their_least_are_refused_at_start_up(
    name: str, raw: str, says: str
) -> None:
    """A negative backoff retried without a pause; a webhook timeout under -15 s gave
    deliveries a lease that had passed when it was taken (sent twice at once)."""
    done = manage("check", env={**os.environ, "MEMORYADMIN_DEV_SECRETS": "1", name: raw})
    assert done.returncode != 0
    assert f"{name} {says}" in done.stderr


def test_days_to_keep_are_read_from_the_environment_0_for_ever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memoryadmin.settings import KEEP_DAYS_MAX, env_int

    for raw, days in (("", 30), ("0", 0), ("7", 7), ("3650", 3650)):
        monkeypatch.setenv("MEMORYADMIN_JOBS_KEEP_DAYS", raw)
        assert env_int("MEMORYADMIN_JOBS_KEEP_DAYS", 30, minimum=0, maximum=KEEP_DAYS_MAX) == days


# Real worker processes.


def _database_url(tmp_path: Path) -> str:
    if is_postgres():
        return suite_database_url()
    return f"sqlite:///{tmp_path}/worker.sqlite3"


@pytest.fixture
def worker_env(tmp_path: Path, migrated_sqlite: Callable[[Path], Path]) -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(tmp_path),
        "DATABASE_POOL": "0",
        "DJANGO_SETTINGS_MODULE": "memoryadmin.settings",
        "MEMORYADMIN_DEV_SECRETS": "1",
        "MEMORYADMIN_VAR_DIR": str(tmp_path / "var"),
        "MEMORYADMIN_JOB_LEASE_SECONDS": "1",
        "MEMORYADMIN_JOB_BACKOFF_SECONDS": "0",
        "MEMORYADMIN_TASKS_QUEUE": "q" + uuid.uuid4().hex[:12],
        "PYTHONFAULTHANDLER": "1",
    }
    if not is_postgres():
        migrated_sqlite(tmp_path / "worker.sqlite3")
    return env


def _manage(env: dict[str, str], *args: str) -> str:
    done = manage(*args, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _python(env: dict[str, str], code: str) -> str:
    return _manage(env, "shell", "--no-imports", "-c", f"from tests.runner_jobs import *; {code}")


def _state(env: dict[str, str], label: str) -> dict[str, Any]:
    return dict(json.loads(_python(env, f"state({label!r})").strip().splitlines()[-1]))


def _wait_for(condition: Any, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(params=["database", pytest.param("rq", marks=pytest.mark.redis)])
def backend_env(
    request: pytest.FixtureRequest, worker_env: dict[str, str]
) -> Iterator[dict[str, str]]:
    """The worker's environment on each task backend: the same jobs run on RQ by
    configuration only (tasks in a Redis database of their own)."""
    if request.param == "database":
        yield worker_env
        return
    import redis

    url = os.environ.get("MEMORYADMIN_TEST_TASKS_REDIS_URL", "redis://127.0.0.1:6379/6")
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.skip(f"needs Redis at {url} (redis-server; .ci/run starts one): {exc}")
    env = {**worker_env, "MEMORYADMIN_TASKS": "rq", "MEMORYADMIN_TASKS_REDIS_URL": url}
    try:
        yield env
    finally:
        for name in client.scan_iter(match=f"*{env['MEMORYADMIN_TASKS_QUEUE']}*"):
            client.delete(name)
        client.close()


def _printed(env: dict[str, str], *calls: str) -> list[Any]:
    """The calls of tests/runner_jobs.py run one after the other in one process (each
    process pays the project's start-up), each printing one line: those lines, read as
    JSON."""
    lines = _python(env, "; ".join(calls)).strip().splitlines()
    return [json.loads(line) for line in lines[len(lines) - len(calls) :]]


@pytest.mark.django_db(transaction=True)
def test_a_worker_removes_finished_task_results_a_day_old_and_expired_sessions(
    worker_env: dict[str, str], tmp_path: Path
) -> None:
    """Each attempt of a job is a row of the database task backend, which keeps it once
    finished; the job's own row is the record. A worker removes those a day old, and the
    pages' expired sessions, when it starts and every hour."""
    marker = tmp_path / "no-pause"
    marker.write_text("the job writes twice without stopping")
    _printed(
        worker_env,
        *(
            f"enqueue_marked(write_twice, {label!r}, {str(marker)!r})"
            for label in ("first", "second")
        ),
    )
    _manage(worker_env, "worker", "--once")
    first, counts = _printed(worker_env, "state('first')", "task_results()")
    assert first["jobs"] == [{"state": "done", "attempts": 1}]
    # At least one result a job (a sweep hands a job over again when its lease, 1 s here,
    # passed before it ran: that task finds it done).
    assert counts["recent"] >= 2
    assert (counts["old"], counts["open"], counts["expired_sessions"]) == (0, 0, 0)
    aged, _ = _printed(
        worker_env,
        "task_results_age(25); task_results()",
        f"enqueue_marked(write_twice, 'third', {str(marker)!r})",
    )
    assert aged["expired_sessions"] == 1
    assert aged["old"] >= 2
    _manage(worker_env, "worker", "--once")
    *states, counts = _printed(
        worker_env, "state('first')", "state('second')", "state('third')", "task_results()"
    )
    # The third job's results are a day younger than the others were: they stay.
    assert counts["recent"] >= 1
    assert (counts["old"], counts["open"], counts["expired_sessions"]) == (0, 0, 0)
    for label, state in zip(("first", "second", "third"), states, strict=True):
        assert state == {"jobs": [{"state": "done", "attempts": 1}], "steps": [1, 2]}, label


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_job_leaves_it_to_be_retried_never_half_applied(
    backend_env: dict[str, str], tmp_path: Path
) -> None:
    marker = tmp_path / "between-the-writes"
    _python(backend_env, f"enqueue_marked(write_twice, 'killed', {str(marker)!r})")
    first = worker_start(backend_env, tmp_path / "worker.log")
    try:
        _wait_for(marker.exists, "the job to reach the middle of its work")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        first.kill()
    # Killed between its two writes: neither is there, and the job is not done.
    assert _state(backend_env, "killed") == {
        "jobs": [{"state": "running", "attempts": 1}],
        "steps": [],
    }
    second = worker_start(backend_env, tmp_path / "worker.log")
    try:
        waited = _python(backend_env, "wait_done('killed')").strip().splitlines()[-1]
        assert waited == "true", "timed out waiting for the retry"
    finally:
        worker_stop(second, tmp_path / "worker.log")
    assert second.returncode == 0
    assert _state(backend_env, "killed") == {
        "jobs": [{"state": "done", "attempts": 2}],
        "steps": [1, 2],
    }


@pytest.mark.django_db(transaction=True)
def test_a_worker_stopped_mid_job_finishes_it_then_exits(
    backend_env: dict[str, str], tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    _python(backend_env, f"enqueue_marked(write_when_told, 'stopped', {str(marker)!r})")
    worker = worker_start(backend_env, tmp_path / "worker.log")
    try:
        _wait_for(marker.exists, "the job to start")
        worker.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert worker.poll() is None, "the worker left its job unfinished"
        Path(f"{marker}.go").touch()
    finally:
        worker_stopped(worker, tmp_path / "worker.log")
    assert worker.returncode == 0, (tmp_path / "worker.log").read_text()[-3000:]
    assert _state(backend_env, "stopped") == {
        "jobs": [{"state": "done", "attempts": 1}],
        "steps": [1],
    }


def test_a_worker_waits_out_a_database_it_cannot_use_then_runs_jobs(
    tmp_path: Path, migrated_sqlite: Callable[[Path], Path]
) -> None:
    """A worker started before its database can be used (down, restarting, a file not
    there yet) says so once and tries again, as the web server answers 503 until the
    database is back: it ended with a traceback at the first statement."""
    db = tmp_path / "later" / "worker.sqlite3"  # its folder does not exist yet
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{db}",
        "DJANGO_SETTINGS_MODULE": "memoryadmin.settings",
        "MEMORYADMIN_DEV_SECRETS": "1",
        "MEMORYADMIN_VAR_DIR": str(tmp_path / "var"),
        "MEMORYADMIN_TASKS_QUEUE": "q" + uuid.uuid4().hex[:12],
        "PYTHONFAULTHANDLER": "1",
    }
    log = tmp_path / "worker.log"
    worker = worker_start(env, log)
    try:
        _wait_for(lambda: "cannot be used" in log.read_text(), "the worker to say so")
        time.sleep(1.5)  # another try or two, said nothing more
        assert worker.poll() is None, log.read_text()[-3000:]
        # The folder appears at once with its database whole (the worker may open a file
        # being copied otherwise, which reads as a damaged one).
        ready = tmp_path / "ready"
        ready.mkdir()
        migrated_sqlite(ready / db.name)
        ready.rename(db.parent)
        (tmp_path / "m.go").touch()  # the job writes at once
        _python(env, f"enqueue_marked(write_when_told, 'later', {str(tmp_path / 'm')!r})")
        waited = _python(env, "wait_done('later')").strip().splitlines()[-1]
        assert waited == "true", log.read_text()[-3000:]
    finally:
        worker_stop(worker, log)
    assert worker.returncode == 0, log.read_text()[-3000:]
    said = [json.loads(line)["event"] for line in log.read_text().splitlines() if "{" in line[:1]]
    waits = [line for line in said if line.startswith("worker: the database cannot be used")]
    assert waits == [
        "worker: the database cannot be used (unable to open database file); trying again"
        " every 1.0 s"
    ]
    assert any(line.startswith("worker: the database is back after ") for line in said)
    assert "Traceback" not in log.read_text()
    assert _state(env, "later") == {"jobs": [{"state": "done", "attempts": 1}], "steps": [1]}


@pytest.mark.django_db(transaction=True)
def test_a_worker_process_delivers_webhooks_signed_in_order(
    worker_env: dict[str, str], tmp_path: Path
) -> None:
    from memoryadmin_client.webhooks import verify
    from tests.helpers import Receiver, serve

    for receiver in serve(Receiver()):
        receiver.statuses = [500, 200]
        env = {
            **worker_env,
            "MEMORYADMIN_WEBHOOK_BACKOFF_SECONDS": "0.2",
            "MEMORYADMIN_PROVIDER_ALLOW": "127.0.0.0/8",
        }
        secret = _python(env, f"print(webhook_change({receiver.url!r}, 'plan', 'spec'))")
        worker = worker_start(env, tmp_path / "worker.log")
        try:
            _wait_for(lambda: len(receiver.events()) == 2, "two deliveries")  # noqa: B023
        finally:
            worker_stop(worker, tmp_path / "worker.log")
        sent = [(verify(secret.strip(), h, body), status) for h, body, status in receiver.received]
        assert [(event["data"]["document"], status) for event, status in sent] == [
            ("plan", 500),
            ("plan", 200),
            ("spec", 200),
        ]
        assert sent[0][0]["id"] == sent[1][0]["id"]
