"""Durable jobs: the outbox that background work is written to, in the caller's transaction."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class JobState(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    # Attempts or its deadline ran out: kept for owners to read, never run again by
    # itself (`job_again` runs it again).
    DEAD = "dead"
    # A dead job set aside for good (`job_discard`).
    DISCARDED = "discarded"


OPEN_STATES = (JobState.PENDING, JobState.RUNNING)
FINISHED_STATES = (JobState.DONE, JobState.DEAD, JobState.DISCARDED)


class Job(models.Model):
    # The dotted path of a function decorated with @durable.
    name = models.CharField(max_length=200)
    # The project whose work it is ("" for none): a worker runs at most its share of
    # one project's jobs at once.
    project = models.CharField(max_length=100, blank=True, default="")
    kwargs = models.JSONField(default=dict)
    # At most one open job per nonempty key: enqueuing it again is a no-op.
    key = models.CharField(max_length=200, blank=True, default="")
    # Jobs of one nonempty line run one at a time, oldest first: a later one waits
    # until every earlier one is done or dead (a failing one holds the line).
    line = models.CharField(max_length=200, blank=True, default="")
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=5)
    run_after = models.DateTimeField()
    # Past it, a failed attempt makes the job dead whatever attempts are left.
    deadline_at = models.DateTimeField(null=True, blank=True)
    # A running job whose lease has passed is taken to have died with its worker.
    lease_until = models.DateTimeField(null=True, blank=True)
    # When it was last handed to the task backend; the sweep hands it again if
    # nothing came of that.
    dispatched_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["key"],
                condition=~Q(key="") & Q(state__in=["pending", "running"]),
                name="unique_open_job_key",
            )
        ]
        indexes = [
            models.Index(fields=["state", "run_after"], name="job_due"),
            models.Index(fields=["line", "state", "id"], condition=~Q(line=""), name="job_line"),
            # Housekeeping's finished jobs past their days.
            models.Index(fields=["state", "finished_at"], name="job_finished"),
        ]

    def __str__(self) -> str:
        return f"job {self.pk} {self.name} ({self.state})"
