"""A worker's threads: jobs run concurrently, and fairly across projects.

The task backend hands a worker job ids one at a time; the pool takes each at
once (the backend never waits on a slow job) and runs it on one of `threads`
threads. A project runs at most `per_project` jobs at a time in one worker:
its other jobs wait in the pool, each project in its own line, and a free
thread takes the next job of the project served least recently. So a project
whose webhook receivers or providers are slow holds at most its share of the
threads, and another project's job starts as soon as a thread is free.

A job waiting here has been handed over (its `dispatched_at` is set), so no
other worker's sweep takes it before a lease has passed; a worker that stops
gives its waiting jobs back (clears `dispatched_at`) so that the next sweep,
its own or another worker's, hands them out again. Who runs a job is still
decided by its claim (runner/jobs.py): a job handed twice runs once.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import Counter, OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import connections

from memoryadmin.runner.jobs import job_run
from memoryadmin.runner.models import Job, JobState

logger = logging.getLogger(__name__)


def worker_threads() -> int:
    return int(settings.MEMORYADMIN_WORKER_THREADS)


def worker_jobs_per_project() -> int:
    return int(settings.MEMORYADMIN_WORKER_JOBS_PER_PROJECT)


class JobPool:
    def __init__(self, *, threads: int, per_project: int) -> None:
        self.threads = threads
        self.per_project = max(1, min(per_project, threads))
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._running: Counter[str] = Counter()
        # Each project's waiting jobs, and when each project last had a job started.
        self._waiting: OrderedDict[str, deque[int]] = OrderedDict()
        self._served: dict[str, int] = {}
        self._turns = itertools.count()
        # Jobs waiting or running here: a job handed twice is taken once.
        self._held: set[int] = set()
        self._busy = 0
        self._closed = False
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="job")

    def offer(self, job_id: int) -> str:
        """Takes a job to run when its project's turn comes: "queued", or "skipped" when
        there is no such job or this pool has it already."""
        project = Job.objects.filter(pk=job_id).values_list("project", flat=True).first()
        if project is None:
            return "skipped"
        with self._lock:
            if self._closed or job_id in self._held:
                return "skipped"
            self._held.add(job_id)
            self._waiting.setdefault(project, deque()).append(job_id)
            self._start()
        return "queued"

    def _start(self) -> None:
        """Starts waiting jobs while threads are free (the lock held)."""
        while self._busy < self.threads:
            eligible = [p for p in self._waiting if self._running[p] < self.per_project]
            if not eligible:
                return
            # The project served least recently goes first (one never served, first of all).
            project = min(eligible, key=lambda p: self._served.get(p, -1))
            line = self._waiting[project]
            job_id = line.popleft()
            if not line:
                del self._waiting[project]
            self._served[project] = next(self._turns)
            self._running[project] += 1
            self._busy += 1
            self._executor.submit(self._run, job_id, project)

    def _run(self, job_id: int, project: str) -> None:
        try:
            job_run(job_id)
        except Exception:
            logger.exception("job %s could not be run", job_id)
        finally:
            # This thread's database connections go back (each thread has its own).
            connections.close_all()
            with self._lock:
                self._running[project] -= 1
                if not self._running[project]:
                    del self._running[project]
                self._busy -= 1
                self._held.discard(job_id)
                if not self._closed:
                    self._start()
                self._changed.notify_all()

    def running(self, project: str) -> int:
        with self._lock:
            return self._running[project]

    def idle(self) -> bool:
        with self._lock:
            return not self._busy and not self._waiting

    def wait_idle(self) -> None:
        """Waits until nothing runs or waits (`manage.py worker --once`)."""
        with self._changed:
            self._changed.wait_for(lambda: not self._busy and not self._waiting)

    def close(self) -> None:
        """Gives the waiting jobs back and waits for the running ones to finish."""
        with self._lock:
            self._closed = True
            waiting = [job_id for line in self._waiting.values() for job_id in line]
            self._waiting.clear()
            self._held.difference_update(waiting)
        if waiting:
            Job.objects.filter(pk__in=waiting, state=JobState.PENDING).update(dispatched_at=None)
            connections.close_all()
        self._executor.shutdown(wait=True)
