"""What the Deployments page shows: the active deployment of each agent in an environment."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from memoryadmin.core.environments import check_environment
from memoryadmin.memory.models import ActiveDeployment, Deployment, Project
from memoryadmin.memory.services.deployments import declarations_public


@dataclass(frozen=True)
class Active:
    agent: str
    deployment: Deployment
    promoted_at: datetime
    declarations: list[dict[str, object]]


def deployments_active(*, project: Project, environment: str) -> list[Active]:
    check_environment(environment)
    rows = (
        ActiveDeployment.objects.filter(project=project, environment=environment)
        .select_related("deployment")
        .order_by("agent")
    )
    return [
        Active(
            agent=row.agent,
            deployment=row.deployment,
            promoted_at=row.promoted_at,
            declarations=declarations_public(row.deployment.memory),
        )
        for row in rows
    ]
