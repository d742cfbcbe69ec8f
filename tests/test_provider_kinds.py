"""Provider kinds are plugins: a kind the suite adds (`echo`) works through every door."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from memoryadmin.core.errors import InvalidRequest
from memoryadmin.memory.models import Document, Resource
from memoryadmin.memory.providers import NotSupported, provider_for, provider_kinds

BASE = "/api/managed-agents/projects/acme"
SESSIONS = "/api/managed-agents/sessions"
ECHO = {"id": "scratch", "description": "Echoed notes.", "provider": {"kind": "echo"}}


def post(api: APIClient, url: str, body: Any, **headers: Any) -> Any:
    return api.post(url, data=json.dumps(body), content_type="application/json", **headers)


def deploy_echo(api: APIClient) -> Any:
    body = {"agent": "echo-bot", "memory": [ECHO], "promote": "development"}
    return post(api, f"{BASE}/deployments", body)


def start(api: APIClient, access: str, key: str) -> str:
    binding = {"scope": "namespace", "id": "team", "access": access}
    body = {"agentId": "echo-bot@development", "memory": {"scratch": binding}}
    response = post(api, SESSIONS, body, HTTP_IDEMPOTENCY_KEY=key)
    assert response.status_code == 201, response.json()
    return str(response.json()["session"]["id"])


def recall(api: APIClient, session_id: str) -> dict[str, Any]:
    response = post(api, f"{SESSIONS}/{session_id}/memory/recall", {"use": ["scratch"]})
    assert response.status_code == 200, response.json()
    return dict(response.json())


def call(api: APIClient, session_id: str, recall_id: str, name: str, arguments: Any) -> Any:
    body = {"recallId": recall_id, "callId": "c1", "name": name, "arguments": arguments}
    return post(api, f"{SESSIONS}/{session_id}/memory/tool-calls", body)


def test_a_kind_nobody_registered_is_refused(api: APIClient) -> None:
    assert "echo" not in provider_kinds()
    response = deploy_echo(api)
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert "provider.kind must be one of: document, hindsight, http, mem0-oss" in message
    assert "echo" not in message
    assert not Resource.objects.filter(resource_id="scratch").exists()


def test_a_registered_kind_deploys_binds_recalls_and_runs_its_tools(
    api: APIClient, echo_kind: Any
) -> None:
    assert deploy_echo(api).status_code == 201
    assert Resource.objects.get(resource_id="scratch").kind == "echo"
    session_id = start(api, "read-write", "rw")
    first = recall(api, session_id)
    assert first["memory"]["scratch"] == {"text": "", "sources": [], "writable": True}
    assert [tool["name"] for tool in first["tools"]] == ["memory_note", "memory_notes"]
    stored = call(api, session_id, first["recallId"], "memory_note", {"text": "Use tabs."})
    assert (stored.status_code, stored.json()) == (200, {"result": {"status": "stored"}})
    assert echo_kind.notes == {("scratch", "team"): ["Use tabs."]}
    assert recall(api, session_id)["memory"]["scratch"]["text"] == "Use tabs."


def test_a_kinds_write_tool_is_refused_through_a_read_binding(
    api: APIClient, echo_kind: Any
) -> None:
    deploy_echo(api)
    session_id = start(api, "read", "r")
    seen = recall(api, session_id)
    assert [tool["name"] for tool in seen["tools"]] == ["memory_notes"]
    refused = call(api, session_id, seen["recallId"], "memory_note", {"text": "x"})
    assert refused.json() == {"result": {"status": "rejected", "reason": "not_bound", "bound": []}}
    assert echo_kind.notes == {}


def test_a_kind_keeping_no_documents_has_no_document_api(api: APIClient, echo_kind: Any) -> None:
    deploy_echo(api)
    url = f"{BASE}/memory/scratch/documents?environment=development"
    response = api.get(url)
    assert response.status_code == 400
    assert "echo provider; it keeps no documents here" in response.json()["error"]["message"]
    assert not Document.objects.exists()


def test_records_that_live_elsewhere_are_managed_through_the_interface(
    project: Any, echo_kind: Any
) -> None:
    echo_kind.notes[("scratch", "team")] = ["one", "two"]
    resource = Resource(project=project, environment="development", resource_id="scratch")
    rows, cursor = echo_kind.records_list(resource=resource, namespace="team")
    assert (rows, cursor) == ([{"id": "0", "text": "one"}, {"id": "1", "text": "two"}], None)
    echo_kind.record_delete(resource=resource, namespace="team", record_id="0")
    assert echo_kind.notes[("scratch", "team")] == ["two"]
    with pytest.raises(NotSupported) as refused:
        echo_kind.record_history(resource=resource, namespace="team", record_id="1")
    assert refused.value.code == "not_supported"


def test_document_memory_manages_its_records_here_not_through_the_interface(
    notes: Resource,
) -> None:
    with pytest.raises(NotSupported):
        provider_for("document").records_list(resource=notes, namespace="")
    with pytest.raises(InvalidRequest):
        provider_for("nonesuch")
