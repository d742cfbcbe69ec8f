"""The demo project that `make run` sets up: idempotent, so a second run changes nothing."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from memoryadmin.core.environments import DEFAULT_ENVIRONMENT, Environment
from memoryadmin.core.errors import Conflict, NotFound
from memoryadmin.files import private_write
from memoryadmin.memory.models import Document, Project
from memoryadmin.memory.services.deployments import (
    active_deployment,
    declarations_normalize,
    deployment_create,
    resource_get,
)
from memoryadmin.memory.services.documents import document_create
from memoryadmin.memory.services.keys import api_key_authenticate, api_key_create
from memoryadmin.memory.services.projects import project_create, project_get
from memoryadmin.providers.services.secrets import (
    check_origins,
    secret_list,
    secret_resolve,
    secret_set,
)
from memoryadmin.refprovider.declaration import (
    TOKEN_SECRET_NAME,
    reference_declaration,
    reference_token,
)
from memoryadmin.web.models import ProjectRole
from memoryadmin.web.services.roles import role_grant, user_create

PROJECT_ID = "demo"
AGENT = "support-bot"
DEFAULT_BASE_URL = "http://127.0.0.1:8000"


def demo_manifest(base_url: str = DEFAULT_BASE_URL) -> dict[str, Any]:
    """The demo agent's manifest; its http resource points at this server."""
    return {
        "agent": AGENT,
        "memory": [
            {
                "id": "notes",
                "description": "Workshop requirements and decisions.",
                "provider": {"kind": "document", "maxBytes": 8192},
            },
            {
                "id": "kb",
                "description": "Product knowledge the support agent may consult.",
                "provider": {"kind": "document", "maxBytes": 16384},
            },
            # An http provider: the reference provider served by the same server.
            reference_declaration(
                resource_id="facts",
                base_url=base_url,
                description="Facts the support agent learned about customers and their setups.",
            ),
        ],
    }


DOCUMENTS: list[dict[str, Any]] = [
    {
        "resource": "notes",
        "doc_id": "workshop",
        "title": "Workshop notes",
        "text": "Exercises must run on Node.js 22.\nNo paid external services for the demo.\n",
        "summary": "Workshop runtime requirements.",
    },
    {
        "resource": "notes",
        "doc_id": "onboarding",
        "title": "Onboarding checklist",
        "text": "1. Create an API key.\n2. Deploy the agent.\n3. Bind notes to the session.\n",
        "summary": "Steps for a new team member.",
    },
    {
        "resource": "kb",
        "doc_id": "refunds",
        "title": "Refund policy",
        "text": "Refunds within 30 days of purchase, no questions asked.\n",
        "summary": "30-day refunds.",
    },
    {
        "resource": "kb",
        "doc_id": "shipping",
        "title": "Shipping times",
        "text": "EU: 2-4 working days. US: 5-8 working days.\n",
        "summary": "Delivery estimates by region.",
    },
]


# Memory page logins, one of each role: (username, role on the demo project).
USERS = [("demo-owner", "owner"), ("demo-support", "support"), ("demo-viewer", "viewer")]


@dataclass
class DemoLogin:
    username: str
    password: str
    role: str


@dataclass
class DemoResult:
    project: Project
    api_key: str
    created: list[str]
    logins: list[DemoLogin] = field(default_factory=list)


def _key_file() -> Path:
    return Path(settings.VAR_DIR) / "demo-api-key"


def _demo_key(project: Project, created: list[str]) -> str:
    path = _key_file()
    if path.exists():
        raw = path.read_text().strip()
        if api_key_authenticate(raw=raw) is not None:
            return raw
    _, raw = api_key_create(project_id=project.id, name="demo", actor="demo")
    private_write(path, raw + "\n")
    created.append("api key")
    return raw


def _logins_file() -> Path:
    return Path(settings.VAR_DIR) / "demo-logins.json"


def _demo_logins(project: Project, created: list[str]) -> list[DemoLogin]:
    """The demo users, with passwords generated once and kept in var/ (mode 0600)."""
    path = _logins_file()
    saved: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
    model = get_user_model()
    logins = []
    for username, role in USERS:
        password = saved.get(username, "")
        user = model.objects.filter(username=username).first()
        if user is None or not password or not user.check_password(password):
            made = None
            if user is None:
                # As a person's login is made for a role (`user.invite`, audited).
                made = user_create(
                    username=username, project_id=project.id, role=role, actor="demo"
                )
                user = model.objects.get(username=username)
            if made is not None:
                password = made
            else:
                password = secrets.token_urlsafe(12)
                user.set_password(password)
                user.save(update_fields=["password"])
            created.append(f"login {username}")
        if not ProjectRole.objects.filter(user=user, project=project, role=role).exists():
            role_grant(username=username, project_id=project.id, role=role, actor="demo")
        logins.append(DemoLogin(username=username, password=password, role=role))
    passwords = {login.username: login.password for login in logins}
    if passwords != saved:
        private_write(path, json.dumps(passwords, indent=2) + "\n")
    return logins


def _demo_provider_token(project: Project, base_url: str, created: list[str]) -> None:
    """The reference provider's token, stored as the server-level secret the `facts`
    connection names, bound to the origin this server answers at."""
    token = reference_token()
    origins = check_origins([base_url.rstrip("/")])
    for environment in Environment:
        try:
            current = secret_resolve(
                project_id=project.id, environment=environment, name=TOKEN_SECRET_NAME
            )
        except NotFound:
            current = None
        bound = {
            row["name"]: row["origins"]
            for row in secret_list(project=project, environment=environment)
        }
        if current != token or bound.get(TOKEN_SECRET_NAME) != origins:
            secret_set(
                project=project,
                environment=environment,
                name=TOKEN_SECRET_NAME,
                value=token,
                origins=origins,
                server_level=True,
                actor="demo",
            )
            created.append(f"secret {TOKEN_SECRET_NAME} ({environment})")


@transaction.atomic
def demo_setup(*, base_url: str = DEFAULT_BASE_URL) -> DemoResult:
    created: list[str] = []
    project = Project.objects.filter(id=PROJECT_ID).first()
    if project is None:
        # Made as `createproject` makes a project, audited in its own log.
        try:
            project = project_create(project_id=PROJECT_ID, name="Demo project", actor="demo")
            created.append("project demo")
        except Conflict:  # made meanwhile, by a run at the same time
            project = project_get(project_id=PROJECT_ID)
    # The token first: a deployment may send it only where it is bound.
    _demo_provider_token(project, base_url, created)
    manifest = demo_manifest(base_url)
    declarations = declarations_normalize(manifest["memory"], project=project.pk)
    for environment in Environment:
        active = active_deployment(project=project, environment=environment, agent=AGENT)
        if active is None or active.memory != declarations:
            deployment_create(
                project=project,
                agent=AGENT,
                memory=manifest["memory"],
                promote=environment,
                actor="demo",
            )
            created.append(f"deployment ({environment})")
    for spec in DOCUMENTS:
        resource = resource_get(
            project=project, environment=DEFAULT_ENVIRONMENT, resource_id=spec["resource"]
        )
        if not Document.objects.filter(resource=resource, doc_id=spec["doc_id"]).exists():
            fields = {k: v for k, v in spec.items() if k != "resource"}
            document_create(resource=resource, actor="demo", **fields)
            created.append(f"document {spec['resource']}/{spec['doc_id']}")
    api_key = _demo_key(project, created)
    logins = _demo_logins(project, created)
    return DemoResult(project=project, api_key=api_key, created=created, logins=logins)
