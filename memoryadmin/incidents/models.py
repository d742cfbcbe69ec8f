"""Memory incidents: what a source of bad memory reached (its taint graph), and what
containing it did."""

from __future__ import annotations

from django.db import models

from memoryadmin.core.environments import Environment
from memoryadmin.memory.models import Project


class Incident(models.Model):
    id = models.CharField(primary_key=True, max_length=40)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="incidents")
    environment = models.CharField(max_length=16, choices=Environment.choices)
    title = models.CharField(max_length=200)
    # {"session": id} | {"version": {resource, document, revision}} | {"apiKey": prefix}
    # | {"text": exact text}, as given.
    source = models.JSONField()
    hops = models.PositiveSmallIntegerField()
    # {"nodes": [...], "edges": [...]} as traced when the incident was opened.
    graph = models.JSONField(default=dict)
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField()
    # The last containment that wrote something (or the first, if none did), and its report.
    contained_at = models.DateTimeField(null=True, blank=True)
    containment = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["project", "environment", "-created_at", "id"], name="incident_newest"
            )
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.title}"


class NamedOperation(models.Model):
    """A provider operation an incident's containment report names (a record's undo: its
    dead letter, or the delete its provider queued): kept as long as the report names it,
    past the days operations are kept, so the report's id still leads to it."""

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="operations")
    operation_id = models.CharField(max_length=40)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["incident", "operation_id"], name="incident_operation")
        ]
        # The retention sweep's look-up, by operation.
        indexes = [models.Index(fields=["operation_id"], name="incident_named_operation")]

    def __str__(self) -> str:
        return f"{self.incident_id} {self.operation_id}"
