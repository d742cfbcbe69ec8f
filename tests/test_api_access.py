"""Every endpoint: no key is 401, another project's key is 403, a read-only key cannot write."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from memoryadmin.memory.models import ActiveDeployment, Deployment, Document, Resource
from tests.helpers import DEV, DOCS, Keys

BASE = "/api/managed-agents/projects/acme"
NEW_DEPLOYMENT = {
    "agent": "writer-bot",
    "memory": [{"id": "drafts", "description": "Drafts.", "provider": {"kind": "document"}}],
}


def _doc_rev() -> str:
    return f'"{Document.objects.get(doc_id="workshop").revision}"'


def _deployment_id() -> str:
    return Deployment.objects.get(agent="support-bot").id


# (method, path builder, body, extra headers builder, success status)
Endpoint = tuple[str, Callable[[], str], Any, Callable[[], dict[str, str]], int]
READS: list[Endpoint] = [
    ("get", lambda: f"{BASE}", None, dict, 200),
    ("get", lambda: f"{BASE}/deployments", None, dict, 200),
    ("get", lambda: f"{BASE}/deployments/{_deployment_id()}", None, dict, 200),
    ("get", lambda: f"{BASE}/memory{DEV}", None, dict, 200),
    ("get", lambda: f"{DOCS}{DEV}", None, dict, 200),
    ("get", lambda: f"{DOCS}/workshop{DEV}", None, dict, 200),
    ("get", lambda: f"{DOCS}/workshop/versions{DEV}", None, dict, 200),
]
WRITES: list[Endpoint] = [
    ("post", lambda: f"{BASE}/deployments", NEW_DEPLOYMENT, dict, 201),
    (
        "post",
        lambda: f"{BASE}/deployments/{_deployment_id()}/promote",
        {"environment": "production"},
        dict,
        200,
    ),
    (
        "put",
        lambda: f"{DOCS}/fresh{DEV}",
        {"title": "Fresh"},
        lambda: {"HTTP_IF_NONE_MATCH": "*"},
        201,
    ),
    (
        "put",
        lambda: f"{DOCS}/workshop{DEV}",
        {"text": "new"},
        lambda: {"HTTP_IF_MATCH": _doc_rev()},
        200,
    ),
    (
        "patch",
        lambda: f"{DOCS}/workshop{DEV}",
        {"agentWrites": "disabled"},
        lambda: {"HTTP_IF_MATCH": _doc_rev()},
        200,
    ),
    ("delete", lambda: f"{DOCS}/workshop{DEV}", None, lambda: {"HTTP_IF_MATCH": _doc_rev()}, 204),
]
ALL = READS + WRITES


def call(client: APIClient, endpoint: Endpoint) -> Any:
    method, path, body, headers, _ = endpoint
    kwargs: dict[str, Any] = dict(headers())
    if body is not None:
        kwargs.update(data=json.dumps(body), content_type="application/json")
    return getattr(client, method)(path(), **kwargs)


def snapshot() -> tuple[Any, ...]:
    return (
        list(Document.objects.order_by("id").values_list("doc_id", "revision", "deleted", "text")),
        Deployment.objects.count(),
        list(ActiveDeployment.objects.order_by("id").values_list("environment", "deployment_id")),
        Resource.objects.count(),
    )


@pytest.fixture
def seeded(make_document: Any, keys: Keys) -> Keys:
    make_document("workshop", text="original")
    return keys


@pytest.mark.parametrize("index", range(len(ALL)))
def test_owner_key_succeeds(
    seeded: Keys, client_for: Callable[[str | None], APIClient], index: int
) -> None:
    endpoint = ALL[index]
    response = call(client_for(seeded.owner), endpoint)
    assert response.status_code == endpoint[4], response.content


@pytest.mark.parametrize("index", range(len(ALL)))
def test_all_projects_key_succeeds(
    seeded: Keys, client_for: Callable[[str | None], APIClient], index: int
) -> None:
    endpoint = ALL[index]
    response = call(client_for(seeded.all_projects), endpoint)
    assert response.status_code == endpoint[4], response.content


@pytest.mark.parametrize("index", range(len(ALL)))
def test_no_key_is_401_and_changes_nothing(
    seeded: Keys, client_for: Callable[[str | None], APIClient], index: int
) -> None:
    before = snapshot()
    response = call(client_for(None), ALL[index])
    assert response.status_code == 401
    assert response.json()["error"] == {
        "code": "unauthorized",
        "message": "An API key is required in the x-api-key header.",
    }
    assert response["WWW-Authenticate"] == "x-api-key"
    assert snapshot() == before


@pytest.mark.parametrize("index", range(len(ALL)))
def test_bad_key_is_401_and_changes_nothing(
    seeded: Keys, client_for: Callable[[str | None], APIClient], index: int
) -> None:
    before = snapshot()
    response = call(client_for("mak_not-a-real-key"), ALL[index])
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert snapshot() == before


@pytest.mark.parametrize("index", range(len(ALL)))
def test_other_projects_key_is_403_and_changes_nothing(
    seeded: Keys, client_for: Callable[[str | None], APIClient], index: int
) -> None:
    before = snapshot()
    response = call(client_for(seeded.other), ALL[index])
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    assert snapshot() == before


# Routes whose body says whether they write (dryRun): the key's reach is still decided
# first, so another project's key is refused before its body is read, as everywhere.
BODY_FIRST = [
    f"{BASE}/memory/erasures{DEV}",
    f"{BASE}/memory/notes/restore{DEV}",
    f"{BASE}/memory/incidents/inc_none/contain{DEV}",
]


@pytest.mark.parametrize("path", BODY_FIRST)
@pytest.mark.parametrize("body", ['{"unknown": 1}', "not json", '{"dryRun": true}'])
def test_other_projects_key_is_403_whatever_the_body(
    seeded: Keys, client_for: Callable[[str | None], APIClient], path: str, body: str
) -> None:
    before = snapshot()
    response = client_for(seeded.other).post(path, data=body, content_type="application/json")
    assert response.status_code == 403, response.content
    assert response.json()["error"] == {
        "code": "forbidden",
        "message": "This API key does not reach that project.",
    }
    assert snapshot() == before


@pytest.mark.parametrize("path", BODY_FIRST)
def test_a_reaching_key_still_hears_about_its_body(
    seeded: Keys, client_for: Callable[[str | None], APIClient], path: str
) -> None:
    response = client_for(seeded.owner).post(
        path, data='{"unknown": 1}', content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


@pytest.mark.parametrize("index", range(len(READS)))
def test_read_only_key_can_read(
    seeded: Keys, client_for: Callable[[str | None], APIClient], index: int
) -> None:
    endpoint = READS[index]
    assert call(client_for(seeded.read_only), endpoint).status_code == endpoint[4]


@pytest.mark.parametrize("index", range(len(WRITES)))
def test_read_only_key_cannot_write(
    seeded: Keys, client_for: Callable[[str | None], APIClient], index: int
) -> None:
    before = snapshot()
    response = call(client_for(seeded.read_only), WRITES[index])
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    assert snapshot() == before


def test_project_list_shows_only_reachable_projects(
    seeded: Keys, client_for: Callable[[str | None], APIClient]
) -> None:
    scoped = client_for(seeded.owner).get("/api/managed-agents/projects")
    assert scoped.status_code == 200
    assert [p["id"] for p in scoped.json()["projects"]] == ["acme"]
    everything = client_for(seeded.all_projects).get("/api/managed-agents/projects")
    assert [p["id"] for p in everything.json()["projects"]] == ["acme", "globex"]


def test_unknown_project_is_404_for_all_projects_key(
    seeded: Keys, client_for: Callable[[str | None], APIClient]
) -> None:
    response = client_for(seeded.all_projects).get(f"/api/managed-agents/projects/nope/memory{DEV}")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "project_not_found"


def test_unknown_project_is_403_for_scoped_key(
    seeded: Keys, client_for: Callable[[str | None], APIClient]
) -> None:
    response = client_for(seeded.owner).get("/api/managed-agents/projects/nope")
    assert response.status_code == 403


def test_unknown_route_is_404_envelope(seeded: Keys, client_for: Any) -> None:
    response = client_for(seeded.owner).get("/api/managed-agents/nothing-here")
    assert response.status_code == 404
    assert response.json() == {"error": {"code": "not_found", "message": "No such route."}}


def test_wrong_method_is_405_envelope(seeded: Keys, client_for: Any) -> None:
    response = client_for(seeded.owner).post(f"{DOCS}/workshop{DEV}")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert Document.objects.get(doc_id="workshop").text == "original"


def test_unexpected_error_is_500_envelope(
    seeded: Keys, client_for: Callable[[str | None], APIClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    from memoryadmin.memory.services import documents

    def explode(**kwargs: Any) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(documents, "document_get", explode)
    client = client_for(seeded.owner)
    client.raise_request_exception = False
    response = client.get(f"{DOCS}/workshop{DEV}")
    assert response.status_code == 500
    assert response.json() == {
        "error": {"code": "internal_error", "message": "An internal error occurred."}
    }
    assert "disk on fire" not in response.content.decode()
