"""Shared fixtures: projects, keys of every scope, a deployed resource, API clients."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connection, connections
from rest_framework.test import APIClient

from memoryadmin.memory.models import Project, Resource
from memoryadmin.memory.services.deployments import deployment_create, resource_get
from memoryadmin.memory.services.documents import document_create
from memoryadmin.memory.services.projects import api_key_create, project_create

MANIFEST_MEMORY = [
    {
        "id": "notes",
        "description": "Workshop requirements and decisions.",
        "provider": {"kind": "document", "maxBytes": 8192},
    },
    {
        "id": "kb",
        "description": "Product knowledge.",
        "provider": {"kind": "document", "maxBytes": 64},
    },
]


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    on_postgres = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
    skip = pytest.mark.skip(reason="needs PostgreSQL: set DATABASE_URL=postgres://...")
    for item in items:
        if "postgres" in item.keywords and not on_postgres:
            item.add_marker(skip)


@dataclass
class Keys:
    owner: str  # read-write, this project
    read_only: str  # read-only, this project
    other: str  # read-write, another project
    all_projects: str  # read-write, every project


@pytest.fixture
def project(db: None) -> Project:
    project = project_create(project_id="acme", name="Acme")
    deployment_create(
        project=project,
        agent="support-bot",
        memory=MANIFEST_MEMORY,
        promote="development",
        actor="test",
    )
    return project


@pytest.fixture
def other_project(db: None) -> Project:
    return project_create(project_id="globex", name="Globex")


@pytest.fixture
def keys(project: Project, other_project: Project) -> Keys:
    return Keys(
        owner=api_key_create(project_id=project.id)[1],
        read_only=api_key_create(project_id=project.id, read_only=True)[1],
        other=api_key_create(project_id=other_project.id)[1],
        all_projects=api_key_create(project_id=None)[1],
    )


@pytest.fixture
def notes(project: Project) -> Resource:
    return resource_get(project=project, environment="development", resource_id="notes")


@pytest.fixture
def make_document(notes: Resource) -> Callable[..., Any]:
    def make(doc_id: str = "workshop", **fields: Any) -> Any:
        fields.setdefault("title", doc_id.title())
        resource = fields.pop("resource", notes)
        return document_create(resource=resource, doc_id=doc_id, actor="test", **fields)

    return make


@pytest.fixture
def client_for() -> Callable[[str | None], APIClient]:
    def make(key: str | None) -> APIClient:
        client = APIClient()
        if key is not None:
            client.credentials(HTTP_X_API_KEY=key)
        return client

    return make


@pytest.fixture
def api(client_for: Callable[[str | None], APIClient], keys: Keys) -> APIClient:
    return client_for(keys.owner)


DOCS = "/api/managed-agents/projects/acme/memory/notes/documents"
DEV = "?environment=development"


# Memory page personas: a user per role on "acme", and an outsider who owns
# another project and has no role on "acme".
PASSWORD = "a-long-test-password-1"


@dataclass
class People:
    owner: Any
    support: Any
    viewer: Any
    outsider: Any


@pytest.fixture
def people(project: Project, other_project: Project) -> People:
    from django.contrib.auth import get_user_model

    from memoryadmin.web.services.roles import role_grant

    model = get_user_model()
    users = {}
    for persona, name, project_id, role in [
        ("owner", "olivia", "acme", "owner"),
        ("support", "sam", "acme", "support"),
        ("viewer", "vera", "acme", "viewer"),
        ("outsider", "oscar", "globex", "owner"),
    ]:
        users[persona] = model.objects.create_user(username=name, password=PASSWORD)
        role_grant(username=name, project_id=project_id, role=role, actor="test")
    return People(**users)


@pytest.fixture
def web_client_for() -> Callable[[Any], Any]:
    """A Django test client logged in as the given user (None: anonymous)."""
    from django.test import Client

    def make(user: Any) -> Client:
        client = Client()
        if user is not None:
            client.force_login(user)
        return client

    return make


def run_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    """Runs work(i) in `count` real threads released together by a barrier."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def runner(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[index] = work(index)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=runner, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    return results
