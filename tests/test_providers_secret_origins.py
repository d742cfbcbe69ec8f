"""Secrets go only where they were set to go.

Attacks: a declaration that sends a project secret to another origin, one
that sends the reference provider's token to the caller's own listener,
credentials written as literal header values, and deployment responses that
echo header values. The listeners are real servers on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from rest_framework.test import APIClient

from memoryadmin.demo.project import demo_setup
from memoryadmin.memory.models import AuditEntry, Deployment, Project
from memoryadmin.memory.services.deployments import deployment_create, resource_get
from memoryadmin.memory.services.keys import api_key_create
from memoryadmin.providers.client import ProviderFailure, provider_recall
from memoryadmin.providers.models import Secret
from memoryadmin.providers.services.secrets import secret_set
from memoryadmin.refprovider.declaration import ENDPOINT, MOUNT, TOKEN_SECRET_NAME
from tests.helpers import RecordingProvider as Provider
from tests.helpers import serve

BASE = "/api/managed-agents/projects/acme"
TOKEN = "tok_bound-to-one-origin"


@pytest.fixture
def listener() -> Iterator[Provider]:
    """A listener of the caller's: records every request's headers."""
    yield from serve(Provider())


def bind(project: Project, origins: list[str]) -> None:
    """MEMORY_TOKEN, bound to `origins`."""
    secret_set(
        project=project,
        environment="development",
        name="MEMORY_TOKEN",
        value=TOKEN,
        origins=origins,
        actor="t",
    )


def declaration(origin: str, headers: dict[str, Any], *, path: str = "/memory") -> dict[str, Any]:
    return {
        "id": "knowledge",
        "description": "Facts.",
        "provider": {
            "kind": "http",
            "connection": {
                "id": "svc",
                "origin": origin,
                "methods": ["POST"],
                "pathPrefix": "/",
                "headers": headers,
            },
            "path": path,
        },
    }


def deploy(api: APIClient, memory: dict[str, Any], base: str = BASE) -> Any:
    return api.post(
        f"{base}/deployments",
        {"agent": "researcher", "memory": [memory], "promote": "development"},
        format="json",
    )


def bearer(name: str) -> dict[str, Any]:
    return {"Authorization": {"secret": name, "scheme": "Bearer"}}


# Project secrets and their origins.


def test_a_secret_is_refused_for_any_origin_it_was_not_set_for(
    api: APIClient, project: Project, listener: Provider
) -> None:
    bind(project, ["https://memory.example.com"])
    before = Deployment.objects.count()
    response = deploy(api, declaration(listener.origin, bearer("MEMORY_TOKEN")))
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["message"].startswith("memory[0].provider.connection.headers.Authorization ")
    assert "https://memory.example.com" in error["message"]
    assert TOKEN not in response.content.decode()
    assert Deployment.objects.count() == before
    assert listener.seen == []
    allowed = deploy(api, declaration("https://memory.example.com", bearer("MEMORY_TOKEN")))
    assert allowed.status_code == 201, allowed.json()


def test_a_secret_rebound_after_deploying_is_refused_when_used(
    project: Project, listener: Provider
) -> None:
    deployment_create(
        project=project,
        agent="researcher",
        memory=[declaration(listener.origin, bearer("MEMORY_TOKEN"))],
        promote="development",
        actor="t",
    )
    bind(project, ["https://memory.example.com"])
    resource = resource_get(project=project, environment="development", resource_id="knowledge")
    with pytest.raises(ProviderFailure) as raised:
        provider_recall(
            resource=resource,
            partition="ocmem_v1_p",
            access="read",
            operation_id="mrq_1:knowledge",
            input_text=None,
        )
    assert (raised.value.reason, raised.value.retryable) == ("secret_not_bound", False)
    assert listener.seen == []
    entry = AuditEntry.objects.filter(action="provider.failed").first()
    assert entry is not None
    assert "Authorization" in entry.detail["description"]
    bind(project, [listener.origin, "https://memory.example.com"])
    provider_recall(
        resource=resource,
        partition="ocmem_v1_p",
        access="read",
        operation_id="mrq_2:knowledge",
        input_text=None,
    )
    assert listener.seen[0]["Authorization"] == f"Bearer {TOKEN}"


def test_new_secrets_need_origins_and_replacing_keeps_them(project: Project) -> None:
    from memoryadmin.core.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match="origins is required"):
        secret_set(project=project, environment="development", name="T", value=TOKEN, actor="t")
    assert not Secret.objects.exists()
    secret_set(
        project=project,
        environment="development",
        name="T",
        value=TOKEN,
        origins=["https://A.example.com:443/", "https://b.example.com"],
        actor="t",
    )
    secret_set(project=project, environment="development", name="T", value="new", actor="t")
    row = Secret.objects.get()
    assert (row.value, row.origins) == (
        "new",
        ["https://a.example.com:443", "https://b.example.com"],
    )


# The reference provider's token: a server-level secret.


def test_the_reference_token_cannot_be_sent_to_a_callers_listener(
    live_server: Any, listener: Provider, db: None, settings: Any, tmp_path: Path
) -> None:
    """The reported attack: a read-write key redeclares a provider at its own listener."""
    settings.VAR_DIR = tmp_path  # the demo's key file, not the checkout's
    demo_setup(base_url=live_server.url)
    key = api_key_create(project_id="demo")[1]
    api = APIClient()
    api.credentials(HTTP_X_API_KEY=key)
    base = "/api/managed-agents/projects/demo"
    attempts = [
        # Its own listener, at the reference provider's path.
        declaration(listener.origin, bearer(TOKEN_SECRET_NAME), path=ENDPOINT),
        # Its own listener, anywhere.
        declaration(listener.origin, bearer(TOKEN_SECRET_NAME)),
        # The server itself, at a path other than the reference provider.
        declaration(live_server.url, bearer(TOKEN_SECRET_NAME), path=f"{MOUNT}-other"),
    ]
    for attempt in attempts:
        response = deploy(api, attempt, base)
        assert response.status_code == 400, response.json()
        assert response.json()["error"]["message"].startswith(
            "memory[0].provider.connection.headers.Authorization "
        )
    assert listener.seen == []
    # Nor can a key store the name itself, anywhere.
    stolen = api.put(
        f"{base}/secrets/{TOKEN_SECRET_NAME}?environment=development",
        {"value": "mine", "origins": [listener.origin]},
        format="json",
    )
    assert stolen.status_code == 400
    assert "server-level" in stolen.json()["error"]["message"]
    # The built-in declaration keeps working.
    builtin = deploy(
        api, declaration(live_server.url, bearer(TOKEN_SECRET_NAME), path=ENDPOINT), base
    )
    assert builtin.status_code == 201, builtin.json()
    assert Secret.objects.get(project_id="demo", environment="development").origins == [
        live_server.url
    ]


def test_demo_setup_rebinds_its_token_when_the_address_changes(
    live_server: Any, db: None, settings: Any, tmp_path: Path
) -> None:
    settings.VAR_DIR = tmp_path  # the demo's key file, not the checkout's
    demo_setup(base_url="http://127.0.0.1:8000")
    result = demo_setup(base_url=live_server.url)
    assert f"secret {TOKEN_SECRET_NAME} (development)" in result.created
    for row in Secret.objects.filter(project_id="demo"):
        assert row.origins == [live_server.url]
    assert demo_setup(base_url=live_server.url).created == []


# Literal credentials and echoes.


@pytest.mark.parametrize(
    "header",
    [
        "Authorization",
        "Proxy-Authorization",
        "Cookie",
        "X-Token",
        "Private-Token",
        "X-API-Key",
        "Api-Key",
        "X-Auth-User",
        "X-Client-Secret",
        "X-Password",
        "X-Access-Token",
    ],
)
def test_credential_like_headers_must_name_a_secret(api: APIClient, header: str) -> None:
    before = Deployment.objects.count()
    response = deploy(api, declaration("https://memory.example.com", {header: "literal-value"}))
    assert response.status_code == 400, response.json()
    message = response.json()["error"]["message"]
    assert message.startswith(f"memory[0].provider.connection.headers.{header} must reference")
    assert "literal-value" not in response.content.decode()
    assert Deployment.objects.count() == before


def test_deployments_never_echo_header_values(api: APIClient, project: Project) -> None:
    bind(project, ["https://memory.example.com"])
    headers = {"X-Tenant": "tenant-value-7", **bearer("MEMORY_TOKEN")}
    created = deploy(api, declaration("https://memory.example.com", headers))
    assert created.status_code == 201, created.json()
    listed = api.get(f"{BASE}/deployments")
    one = api.get(f"{BASE}/deployments/{created.json()['id']}")
    for response in (created, listed, one):
        assert response.status_code in {200, 201}
        assert "tenant-value-7" not in response.content.decode()
        assert TOKEN not in response.content.decode()
    shown = created.json()["memory"][0]["provider"]["connection"]["headers"]
    assert shown == {
        "X-Tenant": {"redacted": True},
        "Authorization": {"secret": "MEMORY_TOKEN", "scheme": "Bearer"},
    }
    # The stored declaration keeps the value, and sends it.
    stored = Deployment.objects.get(pk=created.json()["id"]).memory[0]
    assert stored["provider"]["connection"]["headers"]["X-Tenant"] == "tenant-value-7"


# The migration that binds existing secrets.


@pytest.mark.django_db(transaction=True)
def test_the_migration_binds_existing_secrets_to_the_origins_that_use_them() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([("providers", "0001_initial")])
    apps = executor.loader.project_state([("providers", "0001_initial")]).apps
    project = apps.get_model("memory", "Project").objects.create(id="old", name="Old")
    resource_model = apps.get_model("memory", "Resource")
    for resource_id, origin, name in [
        ("a", "https://a.example.com", "USED"),
        ("b", "https://b.example.com:8443", "USED"),
        ("c", "https://c.example.com", "OTHER"),
    ]:
        resource_model.objects.create(
            project=project,
            environment="development",
            resource_id=resource_id,
            kind="http",
            max_bytes=8192,
            config={
                "connection": {"origin": origin, "headers": {"Authorization": {"secret": name}}}
            },
        )
    secret_model = apps.get_model("providers", "Secret")
    for environment, name in [
        ("development", "USED"),
        ("development", "UNUSED"),
        ("production", "USED"),
    ]:
        secret_model.objects.create(project=project, environment=environment, name=name, value="v")
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    origins = {
        (row.environment, row.name): row.origins for row in Secret.objects.filter(project_id="old")
    }
    assert origins == {
        ("development", "USED"): ["https://a.example.com", "https://b.example.com:8443"],
        ("development", "UNUSED"): [],
        ("production", "USED"): [],
    }
