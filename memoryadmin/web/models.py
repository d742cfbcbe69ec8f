"""Who may see and change which project on the Memory page."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from memoryadmin.memory.models import Project


class Role(models.TextChoices):
    OWNER = "owner"
    SUPPORT = "support"
    VIEWER = "viewer"


class ProjectRole(models.Model):
    """One role per user and project; no row means the project is invisible to the user."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="project_roles"
    )
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="user_roles")
    role = models.CharField(max_length=16, choices=Role.choices)
    granted_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "project"], name="one_role_per_user_project")
        ]

    def __str__(self) -> str:
        return f"{self.user_id} {self.role} {self.project_id}"
