"""What the Sessions page reads: a session of one project and environment, its agents."""

from __future__ import annotations

from memoryadmin.agents.errors import SessionNotFound
from memoryadmin.agents.models import Session
from memoryadmin.agents.services.sessions import session_get
from memoryadmin.core.environments import check_environment
from memoryadmin.memory.models import Deployment, Project


def session_in_environment(*, project: Project, environment: str, session_id: str) -> Session:
    """A session of this project and environment; any other is as missing as an unknown one."""
    check_environment(environment)
    try:
        session = session_get(session_id=session_id)
    except SessionNotFound:
        session = None
    if session is None or session.project_id != project.id or session.environment != environment:
        raise SessionNotFound(f"No session '{session_id}' in {environment}.")
    return session


def session_agents(*, project: Project) -> list[str]:
    """The agents that have a deployment in the project: the choices of the agent filter."""
    rows = Deployment.objects.filter(project=project).values_list("agent", flat=True)
    return sorted(set(rows))
