"""The demo project that `make run` sets up: idempotent, so a second run changes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from memoryadmin.memory.models import Document, Project
from memoryadmin.memory.services.deployments import (
    active_deployment,
    declarations_normalize,
    deployment_create,
    resource_get,
)
from memoryadmin.memory.services.documents import document_create
from memoryadmin.memory.services.projects import api_key_authenticate, api_key_create

PROJECT_ID = "demo"
AGENT = "support-bot"
MANIFEST: dict[str, Any] = {
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


@dataclass
class DemoResult:
    project: Project
    api_key: str
    created: list[str]


def _key_file() -> Path:
    return Path(settings.VAR_DIR) / "demo-api-key"


def _demo_key(project: Project, created: list[str]) -> str:
    path = _key_file()
    if path.exists():
        raw = path.read_text().strip()
        if api_key_authenticate(raw=raw) is not None:
            return raw
    _, raw = api_key_create(project_id=project.id, name="demo")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(raw + "\n")
    path.chmod(0o600)
    created.append("api key")
    return raw


@transaction.atomic
def demo_setup() -> DemoResult:
    created: list[str] = []
    project, was_created = Project.objects.get_or_create(
        id=PROJECT_ID, defaults={"name": "Demo project"}
    )
    if was_created:
        created.append("project demo")
    declarations = declarations_normalize(MANIFEST["memory"])
    for environment in ("development", "production"):
        active = active_deployment(project=project, environment=environment, agent=AGENT)
        if active is None or active.memory != declarations:
            deployment_create(
                project=project,
                agent=AGENT,
                memory=MANIFEST["memory"],
                promote=environment,
                actor="demo",
            )
            created.append(f"deployment ({environment})")
    for spec in DOCUMENTS:
        resource = resource_get(
            project=project, environment="development", resource_id=spec["resource"]
        )
        if not Document.objects.filter(resource=resource, doc_id=spec["doc_id"]).exists():
            fields = {k: v for k, v in spec.items() if k != "resource"}
            document_create(resource=resource, actor="demo", **fields)
            created.append(f"document {spec['resource']}/{spec['doc_id']}")
    return DemoResult(project=project, api_key=_demo_key(project, created), created=created)
