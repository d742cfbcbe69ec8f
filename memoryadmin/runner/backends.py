"""What `manage.py worker` runs between sweeps: one batch of the configured task backend."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from types import FrameType

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


def _rq_batch() -> Callable[[], bool]:
    import django_rq
    from django_tasks_rq.backend import Job
    from rq.exceptions import StopRequested

    # Each burst would announce its start, its queues and its end.
    logging.getLogger("rq.worker").setLevel(logging.WARNING)

    def run() -> bool:
        # No fork per job: a killed worker is one process, like the database one.
        worker = django_rq.get_worker(
            settings.MEMORYADMIN_TASKS_QUEUE, job_class=Job, worker_class="rq.worker.SimpleWorker"
        )
        try:
            worker.work(burst=True, with_scheduler=False)
        except StopRequested:
            return False
        # RQ's signal handlers stay installed after a burst: a stop asked for
        # now ends the worker, one asked for during the burst ended it already.
        signal.signal(signal.SIGTERM, _exit)
        signal.signal(signal.SIGINT, _exit)
        return not worker._stop_requested

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
