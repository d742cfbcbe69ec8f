"""`manage.py worker`: runs background jobs until stopped (SIGTERM or Ctrl-C)."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import DatabaseError, connections

from memoryadmin.core.dbstate import database_unavailable, error_line
from memoryadmin.core.inputs import int_argument
from memoryadmin.runner.backends import backend_batch
from memoryadmin.runner.housekeeping import HOUSEKEEPING_SECONDS, housekeeping
from memoryadmin.runner.jobs import jobs_run_by, jobs_run_due, jobs_sweep
from memoryadmin.runner.pool import JobPool, worker_jobs_per_project, worker_threads

logger = logging.getLogger("memoryadmin.worker")


class Command(BaseCommand):
    help = (
        "Run background jobs (provider operations, reconciliation, deliveries) until stopped, "
        "and once an hour remove what is finished and past its days (task results, expired "
        "sessions, deliveries, operations, jobs). "
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

    def check(self, *args: Any, **kwargs: Any) -> None:
        # Django's system checks, without those that open a connection (SQLite's JSON
        # support): a worker started before its database can be used waits for it below.
        super().check(*args, **{**kwargs, "databases": []})

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
        outage = _Outage()
        kept_until = 0.0  # the next housekeeping (runner/housekeeping.py): at once
        while True:
            try:
                if time.monotonic() >= kept_until:
                    # Again at once, after a batch of jobs, while rows are left.
                    done = housekeeping().done
                    kept_until = time.monotonic() + (HOUSEKEEPING_SECONDS if done else 0)
                jobs_sweep()
                if batch is None:
                    # Tasks run where they are enqueued: the worker runs what is due.
                    jobs_run_due()
                elif not batch():
                    return
            except DatabaseError as exc:
                if not database_unavailable(exc) or options["once"]:
                    raise
                # Down, restarting, or not migrated yet: wait for it, as the web server
                # does (503 until it is back), rather than end every worker with it.
                connections.close_all()
                outage.began(exc)
                time.sleep(max(options["interval"], OUTAGE_RETRY_SECONDS))
                continue
            outage.ended()
            if options["once"]:
                pool.wait_idle()
                return
            time.sleep(options["interval"])


# How often a worker tries the database again while it cannot be used.
OUTAGE_RETRY_SECONDS = 1.0


class _Outage:
    """Says once when the database became unusable, and once when it is back."""

    def __init__(self) -> None:
        self.since: float | None = None

    def began(self, exc: DatabaseError) -> None:
        if self.since is None:
            self.since = time.monotonic()
            logger.warning(
                "worker: the database cannot be used (%s); trying again every %s s",
                error_line(exc),
                OUTAGE_RETRY_SECONDS,
            )

    def ended(self) -> None:
        if self.since is not None:
            logger.warning(
                "worker: the database is back after %.0f s; running jobs again",
                time.monotonic() - self.since,
            )
            self.since = None
