"""What the Sessions page reads: a session of one project and environment, its agents."""

from __future__ import annotations

import json

from memoryadmin.agents.errors import SessionNotFound
from memoryadmin.agents.models import Session
from memoryadmin.agents.services.sessions import session_get
from memoryadmin.core.environments import check_environment
from memoryadmin.core.rows import column, database_vendor, fetch_row, table
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
    row = fetch_row(f"SELECT {agents_sql('%s')}", [project.id])
    return agents_value(row[0] if row else None)


def agents_sql(project: str) -> str:
    """`session_agents` as one SQL value, for the project `project` (a column or a
    placeholder): a query that reads it with more (the page's role read) reads it so.
    `agents_value` turns the value into the list."""
    agent = column(Deployment, "agent")
    where = f"{column(Deployment, 'project')} = {project}"
    if database_vendor() == "postgresql":
        return f"ARRAY(SELECT DISTINCT {agent} FROM {table(Deployment)} WHERE {where})"
    return f"(SELECT json_group_array(DISTINCT {agent}) FROM {table(Deployment)} WHERE {where})"


def agents_value(value: object) -> list[str]:
    """The list of agents an `agents_sql` value holds, sorted."""
    if isinstance(value, str):  # SQLite's JSON array
        value = json.loads(value)
    return sorted(value) if isinstance(value, list) else []
