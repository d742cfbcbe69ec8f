"""Webhook endpoints of a project, and their deliveries: the outbox of events.

A delivery row is written in the transaction of the change it reports, so a
rolled-back change sends nothing and a committed one is never lost; the
background runner sends it, as a job of the endpoint's line (see
memoryadmin/webhooks/delivery.py). The row records what was sent and how it
went; its attempts and its next attempt are its job's.
"""

from __future__ import annotations

from datetime import datetime

from django.db import models

from memoryadmin.memory.models import Project
from memoryadmin.runner.models import Job


class LiveEndpoints(models.Manager["Endpoint"]):
    """Endpoints not deleted: an endpoint marked deleted is no one's to read or change,
    and is removed, its deliveries first, by the job its deletion queued."""

    def get_queryset(self) -> models.QuerySet[Endpoint]:
        return super().get_queryset().filter(deleted_at=None)


class Endpoint(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="webhook_endpoints")
    url = models.CharField(max_length=2048)
    # The event types wanted, as ",type,type," so that one LIKE selects the
    # endpoints of an event inside the statement that writes the change.
    events = models.CharField(max_length=1000)
    # Signs every delivery (HMAC-SHA256); shown once, when the endpoint is made.
    secret = models.CharField(max_length=100)
    description = models.CharField(max_length=200, blank=True, default="")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=200, blank=True, default="")
    # When its owner deleted it (inactive too, so that nothing more is queued for it);
    # the row goes once `webhook_endpoint_purge` has removed its deliveries.
    deleted_at = models.DateTimeField(null=True, blank=True)

    # The endpoints not deleted (`_base_manager` has the deleted ones too).
    objects = LiveEndpoints()

    class Meta:
        indexes = [models.Index(fields=["project", "active"], name="webhook_endpoint_project")]

    def __str__(self) -> str:
        return f"webhook {self.pk} {self.url}"

    @property
    def event_list(self) -> list[str]:
        return [event for event in self.events.split(",") if event]


class DeliveryState(models.TextChoices):
    PENDING = "pending"
    # Being sent by its job (which, if its worker died, runs again past its lease).
    SENDING = "sending"
    DELIVERED = "delivered"
    # Attempts ran out; kept for owners, who can redeliver it.
    FAILED = "failed"


OPEN_DELIVERY_STATES = (DeliveryState.PENDING, DeliveryState.SENDING)
FINISHED_DELIVERY_STATES = (DeliveryState.DELIVERED, DeliveryState.FAILED)


class Delivery(models.Model):
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="deliveries")
    # The same for every endpoint an event goes to; receivers deduplicate by it.
    event_id = models.CharField(max_length=40)
    event = models.CharField(max_length=40)
    # The exact JSON sent (and signed), fixed when the event happened.
    body = models.TextField()
    state = models.CharField(
        max_length=16, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    # The runner's job that sends it (a redelivery runs the same job again).
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    response_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True, default="")
    # The first KiB of the receiver's last reply (as UTF-8 text, undecodable bytes
    # replaced), for owners to see what it said. A database default: the outbox's
    # INSERT names only the columns it knows.
    response_excerpt = models.TextField(blank=True, db_default="")
    created_at = models.DateTimeField()
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # One delivery per event and endpoint: a redelivery reuses the row.
            models.UniqueConstraint(fields=["endpoint", "event_id"], name="one_delivery_per_event")
        ]
        indexes = [
            models.Index(fields=["endpoint", "state", "id"], name="webhook_delivery_queue"),
            # Housekeeping's finished deliveries past their days.
            models.Index(fields=["state", "last_attempt_at"], name="webhook_delivery_finished"),
        ]

    def __str__(self) -> str:
        return f"delivery {self.pk} {self.event} ({self.state})"

    @property
    def attempts(self) -> int:
        return self.job.attempts if self.job is not None else 0

    @property
    def next_attempt_at(self) -> datetime | None:
        return self.job.run_after if self.job is not None else None
