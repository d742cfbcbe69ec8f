"""HTTP provider declarations through the deployments API: every settings rule, field named."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from memoryadmin.memory.models import Deployment, Resource
from memoryadmin.memory.providers import provider_for
from memoryadmin.providers.declarations import origin_check
from memoryadmin.providers.http import HttpProvider

BASE = "/api/managed-agents/projects/acme"
SCHEMA = {
    "type": "object",
    "properties": {"fact": {"type": "string", "maxLength": 2000}},
    "required": ["fact"],
    "additionalProperties": False,
}


def http_declaration(**provider: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "kind": "http",
        "connection": {
            "id": "memory-service",
            "origin": "https://memory.example.com",
            "methods": ["POST"],
            "pathPrefix": "/oc-memory",
            "headers": {"Authorization": {"secret": "MEMORY_TOKEN", "scheme": "Bearer"}},
        },
        "path": "/oc-memory",
        "maxBytes": 8192,
        "tools": [
            {
                "name": "remember",
                "description": "Save a verified fact.",
                "access": "write",
                "idempotent": False,
                "input": copy.deepcopy(SCHEMA),
            }
        ],
    }
    base.update(provider)
    return {"id": "knowledge", "description": "Verified facts.", "provider": base}


def deploy(api: APIClient, declaration: dict[str, Any], **body: Any) -> Any:
    return api.post(
        f"{BASE}/deployments",
        {"agent": "researcher", "memory": [declaration], **body},
        format="json",
    )


def test_http_kind_is_registered() -> None:
    assert isinstance(provider_for("http"), HttpProvider)


def test_valid_http_declaration_is_normalised_and_promoted(api: APIClient) -> None:
    declaration = http_declaration()
    del declaration["provider"]["tools"][0]["idempotent"]
    response = deploy(api, declaration, promote="development")
    assert response.status_code == 201, response.json()
    provider = response.json()["memory"][0]["provider"]
    assert provider["kind"] == "http"
    assert provider["tools"][0]["idempotent"] is False
    assert provider["connection"]["headers"] == {
        "Authorization": {"secret": "MEMORY_TOKEN", "scheme": "Bearer"}
    }
    resource = Resource.objects.get(resource_id="knowledge", environment="development")
    assert (resource.kind, resource.max_bytes) == ("http", 8192)
    assert set(resource.config) == {"connection", "path", "tools"}
    assert resource.config["path"] == "/oc-memory"
    assert resource.config["connection"]["origin"] == "https://memory.example.com"
    assert resource.config["tools"][0]["name"] == "remember"


def test_defaults_path_max_bytes_and_tools(api: APIClient) -> None:
    declaration = http_declaration()
    for name in ("path", "maxBytes", "tools"):
        del declaration["provider"][name]
    declaration["provider"]["connection"]["pathPrefix"] = "/"
    response = deploy(api, declaration)
    assert response.status_code == 201, response.json()
    provider = response.json()["memory"][0]["provider"]
    assert (provider["path"], provider["maxBytes"], provider["tools"]) == ("/memory", 8192, [])


@pytest.mark.parametrize(
    "origin",
    ["http://127.0.0.1:8000", "http://127.8.9.10", "http://[::1]:9000", "http://LOCALHOST:1"],
)
def test_http_origin_is_allowed_on_loopback(api: APIClient, origin: str) -> None:
    declaration = http_declaration()
    declaration["provider"]["connection"]["origin"] = origin
    response = deploy(api, declaration)
    assert response.status_code == 201, response.json()


def test_origin_is_normalised() -> None:
    assert origin_check("HTTPS://Memory.Example.com:8443/") == "https://memory.example.com:8443"
    assert origin_check("http://[0:0:0:0:0:0:0:1]") == "http://[::1]"


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation of the provider dict at a dotted path ("connection.origin", "tools.0.name")."""

    def mutate(provider: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = provider
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        elif value is DELETE:
            del node[last]
        else:
            node[last] = value

    return mutate


DELETE = object()
TOOL = {"name": "t", "description": "d", "access": "read", "input": {"type": "object"}}

# (mutation, text the 400 message must contain)
INVALID: list[tuple[Callable[[dict[str, Any]], None], str]] = [
    (_set("connection", DELETE), "memory[0].provider.connection is required"),
    (_set("connection.origin", "http://memory.example.com"), "connection.origin must use https"),
    (_set("connection.origin", "http://10.0.0.1"), "connection.origin must use https"),
    (_set("connection.origin", "ftp://memory.example.com"), "connection.origin must use https"),
    (_set("connection.origin", "https://u:p@memory.example.com"), "user-info"),
    (_set("connection.origin", "https://memory.example.com?x=1"), "query string"),
    (_set("connection.origin", "https://memory.example.com#x"), "fragment"),
    (
        _set("connection.origin", "https://\u043f\u0440\u0438\u043c\u0435\u0440.com"),
        "origin must be ASCII",
    ),
    (_set("connection.origin", "https://memory.example.com\t"), "whitespace or control"),
    (_set("connection.origin", "https://memory.example.com/api"), "without a path"),
    (_set("connection.origin", DELETE), "connection.origin is required"),
    (_set("connection.methods", ["GET"]), "connection.methods must permit POST"),
    (_set("connection.methods", DELETE), "connection.methods is required"),
    (_set("connection.id", "Memory Service"), "connection.id must be"),
    (_set("connection.extra", 1), "connection has unknown fields: extra"),
    (_set("connection.headers.Authorization", "Bearer hunter2"), "headers.Authorization must"),
    (_set("connection.headers.Cookie", "session=hunter2"), "headers.Cookie must reference"),
    (_set("connection.headers.X-API-Key", "hunter2"), "headers.X-API-Key must reference"),
    (_set("connection.headers.Host", "evil.example.com"), "headers.Host is set by the host"),
    (_set("connection.headers.X-Tenant", {"secret": "9BAD"}), "headers.X-Tenant.secret must"),
    (_set("connection.headers.X-Tenant", {"secret": "OK", "x": 1}), "unknown fields: x"),
    (_set("connection.headers.X-Tenant", "line\nbreak"), "headers.X-Tenant must be printable"),
    (_set("path", "oc-memory"), "provider.path must start with a single '/'"),
    (_set("path", "//oc-memory"), "provider.path must start with a single '/'"),
    (_set("path", "/oc-memory/a b"), "provider.path must not contain whitespace"),
    (_set("path", "/oc-memory?x=1"), "provider.path must not contain a query"),
    (_set("path", "/oc-memory#x"), "provider.path must not contain a fragment"),
    (_set("path", "/other"), "provider.path must lie inside the connection's pathPrefix"),
    (_set("path", "/oc-memory/../admin"), "provider.path must not contain '.' or '..'"),
    (_set("path", "/oc-memoryx"), "provider.path must lie inside"),
    (_set("connection.pathPrefix", "oc"), "connection.pathPrefix must start with"),
    (_set("maxBytes", 0), "provider.maxBytes must be an integer from 1 to 16384"),
    (_set("maxBytes", 16385), "provider.maxBytes must be an integer from 1 to 16384"),
    (_set("tools", [dict(TOOL, name=f"t{i}") for i in range(9)]), "at most 8 tools"),
    (_set("tools", [TOOL, TOOL]), "tools[1].name 't' is declared twice"),
    (_set("tools.0.name", "Remember"), "tools[0].name must be 1-32 lowercase"),
    (_set("tools.0.name", "x" * 33), "tools[0].name must be 1-32 lowercase"),
    (_set("tools.0.name", ""), "tools[0].name must be 1-32 lowercase"),
    (_set("tools.0.description", ""), "tools[0].description is required"),
    (_set("tools.0.access", "read-write"), "tools[0].access is required: 'read' or 'write'"),
    (_set("tools.0.access", DELETE), "tools[0].access is required"),
    (_set("tools.0.idempotent", "yes"), "tools[0].idempotent must be true or false"),
    (_set("tools.0.input", DELETE), "tools[0].input is required"),
    (_set("tools.0.input", {"type": "string"}), 'tools[0].input.type must be "object"'),
    (
        _set("tools.0.input.properties.fact", {"$ref": "#/$defs/x"}),
        "tools[0].input.properties.fact.$ref is not allowed",
    ),
    (_set("tools.0.input.properties.fact", {"type": "strin"}), "not valid JSON Schema 2020-12"),
    (_set("tools.0.input.$schema", "http://json-schema.org/draft-07/schema#"), "$schema must"),
    (_set("tools.0.input.properties.memory", {"type": "string"}), "properties.memory is reserved"),
    (_set("tools.0.input.required", ["fact", "memory"]), "required must not list memory"),
    (_set("tools.0.extra", True), "tools[0] has unknown fields: extra"),
    (_set("unknown", True), "memory[0].provider has unknown fields: unknown"),
]


@pytest.mark.parametrize(("mutate", "expected"), INVALID)
def test_invalid_declaration_is_400_naming_the_field(
    api: APIClient, mutate: Callable[[dict[str, Any]], None], expected: str
) -> None:
    declaration = http_declaration()
    mutate(declaration["provider"])
    response = deploy(api, declaration, promote="development")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert expected in error["message"]
    assert "hunter2" not in error["message"]
    assert not Deployment.objects.filter(agent="researcher").exists()
    assert not Resource.objects.filter(resource_id="knowledge").exists()


def test_origin_is_checked_before_headers(api: APIClient) -> None:
    declaration = http_declaration()
    connection = declaration["provider"]["connection"]
    connection["origin"] = "http://memory.example.com"
    connection["headers"] = {"Authorization": "Bearer hunter2"}
    response = deploy(api, declaration)
    assert response.status_code == 400
    assert "connection.origin" in response.json()["error"]["message"]


def test_changing_kind_from_document_to_http_is_409(api: APIClient) -> None:
    declaration = http_declaration()
    declaration["id"] = "notes"
    response = deploy(api, declaration)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "resource_conflict"
    assert Resource.objects.get(resource_id="notes").kind == "document"
