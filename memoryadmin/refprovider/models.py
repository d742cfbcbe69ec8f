"""The reference provider's own storage: facts per partition and replayable operations.

It shares the database with the host only because it is served by the same
process; it never reads the host's tables.
"""

from __future__ import annotations

from django.db import models


class Partition(models.Model):
    key = models.CharField(max_length=256, unique=True)
    # Advanced by every write; recall hands it out as the cursor.
    version = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return self.key


class Fact(models.Model):
    partition = models.ForeignKey(Partition, on_delete=models.CASCADE, related_name="facts")
    title = models.CharField(max_length=200, blank=True)
    text = models.TextField()
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["partition", "-created_at"], name="fact_newest_first")]

    def __str__(self) -> str:
        return f"fact:{self.pk}"


class Operation(models.Model):
    """A committed write, replayed to a retry of the same operation until its deadline."""

    partition = models.ForeignKey(Partition, on_delete=models.CASCADE, related_name="operations")
    operation_id = models.CharField(max_length=1024)
    # sha256 of the tool, arguments and cursor: a retry must repeat them exactly.
    fingerprint = models.CharField(max_length=64)
    result = models.JSONField()
    deadline_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["partition", "operation_id"], name="unique_provider_operation"
            )
        ]

    def __str__(self) -> str:
        return f"{self.partition_id}:{self.operation_id}"
