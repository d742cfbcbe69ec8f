"""Deployments, promotion and the resource inventory."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from memoryadmin.memory.models import ActiveDeployment, Deployment, Resource
from tests.helpers import DEV

BASE = "/api/managed-agents/projects/acme"


def deploy(api: APIClient, **body: Any) -> Any:
    return api.post(f"{BASE}/deployments", body, format="json")


def declaration(resource_id: str = "drafts", **provider: Any) -> dict[str, Any]:
    return {
        "id": resource_id,
        "description": "Drafts.",
        "provider": {"kind": "document", **provider},
    }


def test_create_without_promote_activates_nothing(api: APIClient) -> None:
    response = deploy(api, agent="writer", memory=[declaration(maxBytes=100)])
    assert response.status_code == 201
    body = response.json()
    assert body["agent"] == "writer"
    assert body["activeIn"] == []
    assert body["memory"] == [
        {
            "id": "drafts",
            "description": "Drafts.",
            "provider": {"kind": "document", "maxBytes": 100},
        }
    ]
    assert Deployment.objects.filter(id=body["id"], agent="writer").exists()
    assert not Resource.objects.filter(resource_id="drafts").exists()


def test_create_with_promote_creates_resources(api: APIClient) -> None:
    response = deploy(api, agent="writer", memory=[declaration()], promote="production")
    assert response.status_code == 201
    assert response.json()["activeIn"] == ["production"]
    resource = Resource.objects.get(resource_id="drafts", environment="production")
    assert (resource.kind, resource.max_bytes) == ("document", 8192)
    assert ActiveDeployment.objects.get(agent="writer").deployment_id == response.json()["id"]


def test_provider_defaults_to_document(api: APIClient) -> None:
    memory = [{"id": "drafts", "description": "Drafts."}]
    response = deploy(api, agent="writer", memory=memory)
    assert response.status_code == 201
    assert response.json()["memory"][0]["provider"] == {"kind": "document", "maxBytes": 8192}


def test_promote_endpoint(api: APIClient) -> None:
    created = deploy(api, agent="writer", memory=[declaration()]).json()
    response = api.post(
        f"{BASE}/deployments/{created['id']}/promote", {"environment": "development"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["activeIn"] == ["development"]
    assert Resource.objects.filter(resource_id="drafts", environment="development").exists()


def test_promote_to_bad_environment_is_400(api: APIClient) -> None:
    created = deploy(api, agent="writer", memory=[declaration()]).json()
    response = api.post(
        f"{BASE}/deployments/{created['id']}/promote", {"environment": "staging"}, format="json"
    )
    assert response.status_code == 400
    assert ActiveDeployment.objects.filter(agent="writer").count() == 0


def test_unknown_deployment_is_404(api: APIClient) -> None:
    assert api.get(f"{BASE}/deployments/dep_nope").status_code == 404
    response = api.post(
        f"{BASE}/deployments/dep_nope/promote", {"environment": "development"}, format="json"
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_list_filters_by_agent(api: APIClient) -> None:
    deploy(api, agent="writer", memory=[declaration()])
    all_ids = [d["agent"] for d in api.get(f"{BASE}/deployments").json()["deployments"]]
    assert sorted(all_ids) == ["support-bot", "writer"]
    writer = api.get(f"{BASE}/deployments?agent=writer").json()["deployments"]
    assert [d["agent"] for d in writer] == ["writer"]


@pytest.mark.parametrize(
    ("memory", "fragment"),
    [
        ([{"id": "Bad_Id", "description": "d"}], "memory[0].id"),
        ([{"id": "a--b", "description": "d"}], "memory[0].id"),
        ([{"id": "a" * 129, "description": "d"}], "memory[0].id"),
        ([{"id": "ok", "description": ""}], "description"),
        ([{"id": "ok"}], "description"),
        ([declaration(maxBytes=0)], "maxBytes"),
        ([declaration(maxBytes=16385)], "maxBytes"),
        ([declaration(maxBytes="8192")], "maxBytes"),
        ([{"id": "ok", "description": "d", "provider": {"kind": "sql"}}], "kind"),
        ([{"id": "ok", "description": "d", "extra": 1}], "unknown"),
        ([declaration(maxBytes=10), declaration(maxBytes=20)], "disagree"),
    ],
)
def test_bad_declarations_are_400(api: APIClient, memory: Any, fragment: str) -> None:
    before = Deployment.objects.count()
    response = deploy(api, agent="writer", memory=memory, promote="development")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert fragment in response.json()["error"]["message"]
    assert Deployment.objects.count() == before
    assert not Resource.objects.filter(resource_id="ok").exists()


def test_identical_duplicate_declarations_merge(api: APIClient) -> None:
    response = deploy(api, agent="writer", memory=[declaration(), declaration()])
    assert response.status_code == 201
    assert len(response.json()["memory"]) == 1


def test_bad_agent_name_is_400(api: APIClient) -> None:
    response = deploy(api, agent="Not OK", memory=[])
    assert response.status_code == 400


def test_unknown_body_field_is_400(api: APIClient) -> None:
    response = deploy(api, agent="writer", memory=[], colour="red")
    assert response.status_code == 400
    assert not Deployment.objects.filter(agent="writer").exists()


def test_changing_provider_kind_is_409(api: APIClient) -> None:
    memory = [
        {
            "id": "notes",
            "description": "d",
            "provider": {"kind": "document", "maxBytes": 8192},
        }
    ]
    # Fake an existing resource of another kind under the same id.
    Resource.objects.filter(resource_id="notes").update(kind="http")
    response = deploy(api, agent="writer", memory=memory, promote="development")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "resource_conflict"
    assert not Deployment.objects.filter(agent="writer").exists()


def test_inventory_counts_and_declared(api: APIClient, make_document: Any) -> None:
    make_document("a")
    make_document("b")
    response = api.get(f"{BASE}/memory{DEV}")
    assert response.status_code == 200
    kb = {"kind": "document", "maxBytes": 64}
    notes = {"kind": "document", "maxBytes": 8192}
    assert response.json() == {
        "resources": [
            {"id": "kb", "provider": kb, "declared": True, "documents": 0},
            {"id": "notes", "provider": notes, "declared": True, "documents": 2},
        ]
    }


def test_retired_resource_stays_readable_and_editable(api: APIClient, make_document: Any) -> None:
    document = make_document("workshop", text="old")
    # The agent's new deployment no longer declares notes: it is retired.
    response = deploy(api, agent="support-bot", memory=[declaration("kb")], promote="development")
    assert response.status_code == 201
    inventory = {r["id"]: r for r in api.get(f"{BASE}/memory{DEV}").json()["resources"]}
    assert inventory["notes"]["declared"] is False
    assert inventory["notes"]["documents"] == 1
    assert inventory["kb"]["declared"] is True
    replaced = api.put(
        f"{BASE}/memory/notes/documents/workshop{DEV}",
        {"text": "new"},
        format="json",
        HTTP_IF_MATCH=f'"{document.revision}"',
    )
    assert replaced.status_code == 200
    assert replaced.json()["text"] == "new"


def test_inventory_is_per_environment(api: APIClient) -> None:
    response = api.get(f"{BASE}/memory?environment=production")
    assert response.status_code == 200
    assert response.json() == {"resources": []}


def test_the_list_is_paged_newest_first(api: APIClient, project: Any) -> None:
    """A project that deploys on every change has thousands of deployments: 50 a page."""
    Deployment.objects.filter(project=project).delete()
    for i in range(53):
        assert deploy(api, agent="writer" if i % 2 else "reader", memory=[]).status_code == 201
    made = list(
        Deployment.objects.filter(project=project)
        .order_by("-created_at", "id")
        .values_list("id", flat=True)
    )
    first = api.get(f"{BASE}/deployments").json()
    assert [d["id"] for d in first["deployments"]] == made[:50]
    rest = api.get(f"{BASE}/deployments", {"cursor": first["nextCursor"]}).json()
    assert ([d["id"] for d in rest["deployments"]], rest["nextCursor"]) == (made[50:], None)
    writers = api.get(f"{BASE}/deployments", {"agent": "writer"}).json()
    assert len(writers["deployments"]) == 26
    assert writers["nextCursor"] is None
    # A cursor belongs to its filter.
    refused = api.get(f"{BASE}/deployments", {"agent": "writer", "cursor": first["nextCursor"]})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid_request"
