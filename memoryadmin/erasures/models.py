"""Erasures: what was erased, where, and the signed receipt that proves it.

An erasure keeps no copy of what it erased: the match is described by a salted
hash (a text) or by document ids, never by the text.
"""

from __future__ import annotations

from django.db import models

from memoryadmin.core.environments import Environment
from memoryadmin.memory.models import Project


class Erasure(models.Model):
    id = models.CharField(primary_key=True, max_length=40)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="erasures")
    environment = models.CharField(max_length=16, choices=Environment.choices)
    actor = models.CharField(max_length=200)
    reason = models.CharField(max_length=500)
    # "text" or "documents".
    match_kind = models.CharField(max_length=16)
    # The signed receipt, exactly as handed out: {"receipt": {...}, "signature": {...}}.
    signed = models.JSONField()
    # Whether every place was erased (false: a provider record failed; dead letters say which).
    complete = models.BooleanField()
    created_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(
                fields=["project", "environment", "-created_at", "id"], name="erasure_newest"
            )
        ]

    def __str__(self) -> str:
        return self.id


class NamedOperation(models.Model):
    """A provider operation an erasure's receipt names (the dead letter of a delete that
    failed, a delete its provider queued): kept as long as the erasure, past the days
    operations are kept, so the receipt's id still leads to it."""

    erasure = models.ForeignKey(Erasure, on_delete=models.CASCADE, related_name="operations")
    operation_id = models.CharField(max_length=40)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["erasure", "operation_id"], name="erasure_operation")
        ]
        # The retention sweep's look-up, by operation.
        indexes = [models.Index(fields=["operation_id"], name="erasure_named_operation")]

    def __str__(self) -> str:
        return f"{self.erasure_id} {self.operation_id}"
