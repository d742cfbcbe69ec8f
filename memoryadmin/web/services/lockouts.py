"""Login lockouts of a project's people, for its owners to see."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Max, Sum
from django.http import HttpRequest
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


def client_address(request: HttpRequest) -> str | None:
    """The address a login comes from, as the lockouts count it.

    Without proxies (`MEMORYADMIN_PROXY_COUNT=0`) the socket's address: a header is
    what the client says. Behind N proxies that each append the address they saw to
    X-Forwarded-For, the client's is the Nth entry from the right; entries further
    left were written by the client and are ignored.
    """
    count = settings.MEMORYADMIN_PROXY_COUNT
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    forwarded = [part for part in forwarded if part]
    if count > 0 and len(forwarded) >= count:
        return forwarded[-count][:64]
    return request.META.get("REMOTE_ADDR")
