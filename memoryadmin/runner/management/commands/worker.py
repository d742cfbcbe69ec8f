"""`manage.py worker`: runs background jobs until stopped (SIGTERM or Ctrl-C)."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from memoryadmin.core.inputs import int_argument
from memoryadmin.runner.backends import backend_batch
from memoryadmin.runner.jobs import jobs_run_by, jobs_run_due, jobs_sweep
from memoryadmin.runner.pool import JobPool, worker_jobs_per_project, worker_threads


class Command(BaseCommand):
    help = (
        "Run background jobs (provider operations, reconciliation, deliveries) until stopped. "
        "Start one or more beside the web server; see docs/operations.md."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--interval",
            type=float,
            default=1.0,
            help="Seconds between sweeps for due jobs when idle (default 1).",
        )
        parser.add_argument(
            "--threads",
            type=int_argument(minimum=1, maximum=256),
            default=None,
            help="Jobs run at once (default MEMORYADMIN_WORKER_THREADS, 4).",
        )
        parser.add_argument("--once", action="store_true", help="Run what is due now, then exit.")

    def handle(self, *args: Any, **options: Any) -> None:
        threads = options["threads"] or worker_threads()
        # Provider calls bound their requests by the threads that may make them.
        settings.MEMORYADMIN_REQUEST_THREADS = threads + 1
        pool = JobPool(threads=threads, per_project=worker_jobs_per_project())
        batch = backend_batch()
        self.stdout.write(
            f"worker: running jobs on {threads} threads, at most {pool.per_project} of one "
            f"project's at once (sweep every {options['interval']} s)"
        )
        self.stdout.flush()
        try:
            with jobs_run_by(pool.offer):
                self._loop(batch, pool, options)
        finally:
            pool.close()

    def _loop(self, batch: Any, pool: JobPool, options: dict[str, Any]) -> None:
        while True:
            jobs_sweep()
            if batch is None:
                # Tasks run where they are enqueued: the worker runs what is due.
                jobs_run_due()
            elif not batch():
                return
            if options["once"]:
                pool.wait_idle()
                return
            time.sleep(options["interval"])
