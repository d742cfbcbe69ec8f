"""The set-up commands (createproject, createapikey, deploy, demo), the schema and the docs."""

from __future__ import annotations

import hashlib
import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from memoryadmin.memory.models import (
    ActiveDeployment,
    ApiKey,
    Deployment,
    Document,
    Project,
    Resource,
)
from memoryadmin.memory.services.keys import api_key_authenticate


def run(*args: Any) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.django_db
def test_createproject_creates_and_refuses_duplicates() -> None:
    out, _ = run("createproject", "team-a", "--name", "Team A")
    assert out.strip() == "team-a"
    assert Project.objects.get(id="team-a").name == "Team A"
    with pytest.raises(CommandError, match="already exists"):
        run("createproject", "team-a")
    with pytest.raises(CommandError, match="Project ids"):
        run("createproject", "Bad Id")


@pytest.mark.django_db
def test_createapikey_prints_key_last_and_stores_only_a_hash() -> None:
    run("createproject", "team-a")
    out, _ = run("createapikey", "--project", "team-a", "--read-only", "--name", "ci")
    raw = out.strip().splitlines()[-1]
    key = ApiKey.objects.get()
    assert key.hashed == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in {key.hashed, key.prefix, key.name}
    assert (key.project_id, key.read_only, key.name) == ("team-a", True, "ci")
    assert api_key_authenticate(raw=raw) == key


@pytest.mark.django_db
def test_createapikey_for_all_projects() -> None:
    out, _ = run("createapikey", "--all-projects")
    key = api_key_authenticate(raw=out.strip().splitlines()[-1])
    assert key is not None
    assert key.project_id is None
    assert not key.read_only


@pytest.mark.django_db
def test_createapikey_for_unknown_project_fails() -> None:
    with pytest.raises(CommandError, match="No project"):
        run("createapikey", "--project", "ghost")
    assert not ApiKey.objects.exists()


@pytest.mark.django_db
def test_deploy_creates_and_promotes(tmp_path: Path) -> None:
    run("createproject", "team-a")
    manifest = tmp_path / "manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "agent": "support-bot",
                "memory": [
                    {
                        "id": "notes",
                        "description": "Notes.",
                        "provider": {"kind": "document", "maxBytes": 4096},
                    }
                ],
            }
        )
    )
    out, _ = run(
        "deploy", "--project", "team-a", "--environment", "production", "--manifest", manifest
    )
    deployment = Deployment.objects.get(id=out.strip())
    assert deployment.agent == "support-bot"
    assert ActiveDeployment.objects.get(environment="production").deployment == deployment
    resource = Resource.objects.get(project_id="team-a", environment="production")
    assert (resource.resource_id, resource.max_bytes) == ("notes", 4096)


@pytest.mark.django_db
def test_deploy_rejects_bad_manifest(tmp_path: Path) -> None:
    run("createproject", "team-a")
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"agent": "bot", "memory": [{"id": "x"}]}))
    with pytest.raises(CommandError, match="description"):
        run("deploy", "--project", "team-a", "--environment", "development", "--manifest", manifest)
    assert not Deployment.objects.exists()


@pytest.mark.django_db
def test_demo_is_idempotent(settings: Any, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path
    first, _ = run("demo")
    counts = (Document.objects.count(), Deployment.objects.count(), ApiKey.objects.count())
    second, _ = run("demo")
    assert (Document.objects.count(), Deployment.objects.count(), ApiKey.objects.count()) == counts
    assert "nothing (already set up)" in second
    key = (tmp_path / "demo-api-key").read_text().strip()
    assert key in first
    assert key in second
    assert api_key_authenticate(raw=key) is not None
    assert Document.objects.filter(resource__project_id="demo").count() == 4


@pytest.mark.django_db
def test_schema_validates_and_declares_condition_headers() -> None:
    out = StringIO()
    call_command(
        "spectacular", "--validate", "--fail-on-warn", "--format", "openapi-json", stdout=out
    )
    schema = json.loads(out.getvalue())
    headers = {
        p["name"]
        for path in schema["paths"].values()
        for op in path.values()
        for p in op.get("parameters", [])
        if p["in"] == "header"
    }
    assert {"If-Match", "If-None-Match"} <= headers
    assert schema["components"]["securitySchemes"]["ApiKey"]["name"] == "x-api-key"


@pytest.mark.django_db
def test_the_schema_puts_each_operation_under_its_area(client: Client) -> None:
    schema = client.get("/api/schema/?format=json").json()
    prefix = "/api/managed-agents"
    tags = {
        (method.upper(), path.removeprefix(prefix)): op["tags"]
        for path, operations in schema["paths"].items()
        for method, op in operations.items()
    }
    assert all(len(tag) == 1 for tag in tags.values())
    areas = [tag["name"] for tag in schema["tags"]]
    assert {tag[0] for tag in tags.values()} == set(areas)
    assert len(areas) >= 14
    expected = {
        ("GET", "/projects"): "Projects",
        ("POST", "/projects/{p}/deployments/{d}/promote"): "Deployments",
        ("GET", "/projects/{p}/memory"): "Documents",
        ("PUT", "/projects/{p}/memory/{r}/documents/{doc_id}"): "Documents",
        ("POST", "/projects/{p}/memory/{r}/restore"): "Documents",
        ("GET", "/projects/{p}/memory/search"): "Search",
        ("GET", "/projects/{p}/memory/{r}/records/{rec}/history"): "Records",
        ("POST", "/sessions"): "Sessions",
        ("POST", "/sessions/{session_id}/revert"): "Sessions",
        ("POST", "/sessions/{session_id}/memory/recall"): "Recall & tools",
        ("POST", "/sessions/{session_id}/memory/tool-calls"): "Recall & tools",
        ("POST", "/projects/{p}/memory/proposals/{proposal_id}/approve"): "Proposals",
        ("POST", "/projects/{p}/memory/operations/{o}/retry"): "Operations",
        ("POST", "/projects/{p}/memory/export"): "Exports & imports",
        ("POST", "/projects/{p}/memory/import"): "Exports & imports",
        ("GET", "/erasure-key"): "Erasures",
        ("POST", "/projects/{p}/memory/erasures"): "Erasures",
        ("POST", "/projects/{p}/memory/incidents/{i}/contain"): "Incidents",
        ("GET", "/projects/{p}/audit"): "Audit",
        ("POST", "/projects/{p}/api-keys/{k}/rotate"): "Keys",
        ("PUT", "/projects/{p}/secrets/{name}"): "Secrets",
        ("POST", "/projects/{p}/webhooks/{w}/test"): "Webhooks",
    }
    assert {route: tags[route][0] for route in expected} == expected


@pytest.mark.django_db
def test_schema_and_docs_are_served_without_a_cdn(client: Client) -> None:
    schema = client.get("/api/schema/")
    assert schema.status_code == 200
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "swagger-ui" in html
    assert "cdn" not in html.lower()
    assert "unpkg" not in html.lower()
    assert "/static/drf_spectacular_sidecar/" in html


@pytest.mark.django_db
def test_health(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"
