"""Managed secrets: credentials that HTTP memory providers' connections reference by name."""

from __future__ import annotations

from django.db import models

from memoryadmin.core.environments import Environment
from memoryadmin.memory.models import Project


class Secret(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="secrets")
    environment = models.CharField(max_length=16, choices=Environment.choices)
    name = models.CharField(max_length=64)
    # Never leaves the server except as a header value sent to a provider.
    value = models.TextField()
    # The origins (`https://host[:port]`) the value may be sent to.
    origins = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "environment", "name"], name="unique_secret_name"
            )
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.project_id}/{self.environment}/{self.name}"

    def __repr__(self) -> str:
        # The default repr is harmless, but a repr that could grow the value
        # into a traceback or log line is not.
        return f"<Secret {self}>"
