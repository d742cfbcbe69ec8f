"""What `manage.py worker` runs between sweeps: one batch of the configured task backend."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from django.conf import settings
from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, task_backends


def _database_batch() -> Callable[[], bool]:
    from django_tasks_db.management.commands.db_worker import Worker

    # Each batch would announce its start and its end: one line per task is enough.
    logging.getLogger("django_tasks_db").setLevel(logging.WARNING)

    worker = Worker(
        queue_names=[settings.MEMORYADMIN_TASKS_QUEUE],
        interval=0,
        batch=True,
        backend_name=DEFAULT_TASK_BACKEND_ALIAS,
        startup_delay=False,
        max_tasks=None,
        worker_id=f"{socket.gethostname()}-{os.getpid()}"[:64],
        excluded_queue_names=[],
    )
    worker.configure_signals()

    def run() -> bool:
        worker.run()
        # False once SIGTERM or Ctrl-C arrived during a task: stop after it.
        return worker.running

    return run


class _RqStop:
    """A stop asked for (SIGTERM or Ctrl-C) on the RQ backend. The handler only sets
    flags, or exits where no Redis call can be under way: RQ's own handler talks to
    Redis from inside the signal, in the middle of whatever Redis call the signal
    interrupted (a worker using it once did not stop), and an exit raised there leaves
    the connection a reply behind, so RQ's teardown on it failed (exit status 1).

    While a batch is in RQ (`busy`), the stop is RQ's own flag: it ends the burst
    before the next dequeue, after the task it runs."""

    busy = False
    worker: Any = None
    requested = False


def _rq_signal(signum: int, frame: FrameType | None) -> None:
    _RqStop.requested = True
    if not _RqStop.busy:
        sys.exit(0)
    if _RqStop.worker is not None:
        _RqStop.worker._stop_requested = True


def _rq_handle_signals() -> None:
    signal.signal(signal.SIGTERM, _rq_signal)
    signal.signal(signal.SIGINT, _rq_signal)


def _rq_batch() -> Callable[[], bool]:
    import django_rq
    from django_tasks_rq.backend import Job
    from rq.worker import SimpleWorker

    # Each burst would announce its start, its queues and its end.
    logging.getLogger("rq.worker").setLevel(logging.WARNING)

    class BurstWorker(SimpleWorker):
        """No fork per task (a killed worker is one process, like the database one);
        the worker's own signal handling instead of RQ's."""

        def _install_signal_handlers(self) -> None:
            _rq_handle_signals()

    def run() -> bool:
        _RqStop.busy = True
        try:
            # django-rq's annotation says Worker; it takes any RQ worker class.
            _RqStop.worker = django_rq.get_worker(
                settings.MEMORYADMIN_TASKS_QUEUE,
                job_class=Job,
                worker_class=BurstWorker,  # type: ignore[arg-type]
            )
            if not _RqStop.requested:
                _RqStop.worker.work(burst=True, with_scheduler=False)
        finally:
            _RqStop.busy, _RqStop.worker = False, None
        return not _RqStop.requested

    _rq_handle_signals()
    return run


def _exit(signum: int, frame: FrameType | None) -> None:
    sys.exit(0)


def backend_batch() -> Callable[[], bool] | None:
    """A function running every task the backend holds (False: stop was asked for),
    or None when tasks run where they are enqueued. Stopping between batches exits."""
    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGINT, _exit)
    backend = type(task_backends[DEFAULT_TASK_BACKEND_ALIAS]).__module__
    if backend.startswith("django_tasks_db"):
        return _database_batch()
    if backend.startswith("django_tasks_rq"):
        return _rq_batch()
    return None
