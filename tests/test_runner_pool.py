"""A worker's pool of job threads: jobs of several projects at once, each project at most
its share, the project served least recently first. Jobs run for real on the pool's
threads (against the test database) and wait on events the test sets."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from memoryadmin.runner.jobs import durable, enqueue
from memoryadmin.runner.models import Job, JobState
from memoryadmin.runner.pool import JobPool

pytestmark = pytest.mark.django_db(transaction=True)

STARTED: list[str] = []
RELEASE: dict[str, threading.Event] = {}
LOCK = threading.Lock()


@durable(max_attempts=1, atomic=False)
def held(*, label: str) -> None:
    with LOCK:
        STARTED.append(label)
    assert RELEASE[label].wait(30), f"{label} was never released"


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    STARTED.clear()
    RELEASE.clear()
    yield
    for event in RELEASE.values():
        event.set()


def job(project: str, label: str) -> int:
    RELEASE[label] = threading.Event()
    return enqueue(held, project=project, label=label).pk


def started(count: int) -> list[str]:
    deadline = time.monotonic() + 30
    while len(STARTED) < count:
        assert time.monotonic() < deadline, f"only {STARTED} started"
        time.sleep(0.01)
    time.sleep(0.05)  # nothing more should start meanwhile
    with LOCK:
        return list(STARTED)


def test_a_project_runs_at_most_its_share_and_others_start_at_once(settings: Any) -> None:
    pool = JobPool(threads=2, per_project=1)
    try:
        ids = [job("acme", f"a{i}") for i in range(3)] + [job("globex", "b0")]
        assert [pool.offer(i) for i in ids] == ["queued"] * 4
        # acme's first job and globex's job run; acme's others wait for acme's turn.
        assert sorted(started(2)) == ["a0", "b0"]
        assert pool.running("acme") == 1
        RELEASE["b0"].set()
        time.sleep(0.2)
        # Two threads started a0 and b0 at once, in either order; nothing else since.
        assert sorted(STARTED) == ["a0", "b0"], "a second acme job ran beside the first"
        RELEASE["a0"].set()
        assert started(3)[2] == "a1"
        RELEASE["a1"].set()
        RELEASE["a2"].set()
        pool.wait_idle()
    finally:
        pool.close()
    assert STARTED[2:] == ["a1", "a2"]
    assert set(Job.objects.values_list("state", flat=True)) == {JobState.DONE}


def test_the_project_served_least_recently_goes_first() -> None:
    pool = JobPool(threads=1, per_project=1)
    try:
        ids = [job("acme", "a0"), job("acme", "a1"), job("globex", "b0"), job("initech", "c0")]
        for job_id in ids:
            pool.offer(job_id)
        assert started(1) == ["a0"]
        RELEASE["a0"].set()
        # acme's second job waited longer than the others', but acme was just served.
        assert started(2) == ["a0", "b0"]
        RELEASE["b0"].set()
        assert started(3) == ["a0", "b0", "c0"]
        RELEASE["c0"].set()
        assert started(4) == ["a0", "b0", "c0", "a1"]
        RELEASE["a1"].set()
        pool.wait_idle()
    finally:
        pool.close()


def test_a_job_offered_twice_runs_once_and_closing_gives_waiting_jobs_back() -> None:
    pool = JobPool(threads=1, per_project=1)
    first, second = job("acme", "a0"), job("acme", "a1")
    assert pool.offer(first) == "queued"
    assert pool.offer(first) == "skipped"
    assert pool.offer(second) == "queued"
    assert started(1) == ["a0"]
    Job.objects.filter(pk=second).update(dispatched_at="2026-01-01T00:00:00Z")
    closing = threading.Thread(target=pool.close)
    closing.start()
    # The waiting job is given back before the running one may end.
    deadline = time.monotonic() + 30
    while Job.objects.get(pk=second).dispatched_at is not None:
        assert time.monotonic() < deadline, "the waiting job was not given back"
        time.sleep(0.01)
    RELEASE["a0"].set()
    closing.join(30)
    assert not closing.is_alive()
    assert STARTED == ["a0"]
    # The waiting job is pending again, for the next sweep to hand out.
    waiting = Job.objects.get(pk=second)
    assert (waiting.state, waiting.dispatched_at) == (JobState.PENDING, None)
    assert Job.objects.get(pk=first).state == JobState.DONE
