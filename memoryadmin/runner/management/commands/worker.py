"""`manage.py worker`: runs background jobs until stopped (SIGTERM or Ctrl-C)."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from memoryadmin.runner.backends import backend_batch
from memoryadmin.runner.jobs import jobs_run_due, jobs_sweep


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
        parser.add_argument("--once", action="store_true", help="Run what is due now, then exit.")

    def handle(self, *args: Any, **options: Any) -> None:
        batch = backend_batch()
        self.stdout.write(f"worker: running jobs (sweep every {options['interval']} s)")
        self.stdout.flush()
        while True:
            jobs_sweep()
            if batch is None:
                # Tasks run where they are enqueued: the worker runs what is due.
                jobs_run_due()
            elif not batch():
                return
            if options["once"]:
                return
            time.sleep(options["interval"])
