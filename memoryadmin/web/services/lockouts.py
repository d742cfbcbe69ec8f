"""Login lockouts of a project's people, for its owners to see."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Max, Sum
from django.utils import timezone

from memoryadmin.memory.models import Project
from memoryadmin.web.models import ProjectRole


@dataclass(frozen=True)
class Lockout:
    username: str
    failures: int
    until: datetime


def lockouts_for_project(*, project: Project) -> list[Lockout]:
    """People with a role on the project whose user name is locked out now."""
    names = ProjectRole.objects.filter(project=project).values_list("user__username", flat=True)
    since = timezone.now() - settings.AXES_COOLOFF_TIME
    rows = (
        AccessAttempt.objects.filter(username__in=names, attempt_time__gte=since)
        .values("username")
        .annotate(failures=Sum("failures_since_start"), last=Max("attempt_time"))
        .filter(failures__gte=settings.AXES_FAILURE_LIMIT)
        .order_by("username")
    )
    return [
        Lockout(
            username=row["username"],
            failures=row["failures"],
            until=row["last"] + settings.AXES_COOLOFF_TIME,
        )
        for row in rows
    ]
