"""Sessions on http memory: namespace bindings, recall and memory_<name> tools, end to end.

The agent host talks to our management API over real HTTP; we talk to the
reference provider, served by the same live server, over real HTTP.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from rest_framework.test import APIClient

from memoryadmin.agents.kinds import DOOR_TOOLS, reserved_tool_names
from memoryadmin.agents.models import Recall, Session
from memoryadmin.agents.search_tool import SEARCH_TOOL
from memoryadmin.agents.services.runtime import TOOLS
from memoryadmin.agents.services.sessions import session_end
from memoryadmin.core.partitions import partition_key
from memoryadmin.memory.models import ActiveDeployment, AuditEntry, Deployment, Project, Resource
from memoryadmin.memory.services.keys import api_key_create
from memoryadmin.providers.services.secrets import secret_set
from memoryadmin.refprovider.declaration import (
    TOKEN_SECRET_NAME,
    reference_declaration,
)
from memoryadmin.refprovider.models import Fact
from tests.helpers import deploy_reference_provider, is_postgres

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def one_provider_call_at_a_time_on_sqlite(settings: Any) -> None:
    """The live server's request threads share one in-memory SQLite connection, which
    cannot serve two requests at the same moment; a recall calls its providers (here,
    this same server) concurrently. On SQLite the calls take turns (a cap of one); on
    PostgreSQL, where each thread has its own connection, they run together."""
    if not is_postgres():
        settings.MEMORYADMIN_PROVIDER_CONCURRENCY_PER_PROJECT = 1


SESSIONS = "/api/managed-agents/sessions"


class Host:
    """The agent host: creates sessions, recalls, forwards tool calls."""

    def __init__(self, base: str, key: str) -> None:
        self.client = httpx.Client(base_url=base, headers={"x-api-key": key}, timeout=30)
        self.calls = 0

    def session(self, memory: dict[str, Any], key: str) -> httpx.Response:
        return self.client.post(
            SESSIONS,
            json={"agentId": "researcher@development", "memory": memory},
            headers={"Idempotency-Key": key},
        )

    def recall(self, session_id: str, use: list[str], text: str | None = None) -> httpx.Response:
        return self.client.post(
            f"{SESSIONS}/{session_id}/memory/recall",
            json={"use": use, "input": {"text": text}},
        )

    def tool(self, session_id: str, recall_id: str, name: str, arguments: Any) -> httpx.Response:
        self.calls += 1
        return self.client.post(
            f"{SESSIONS}/{session_id}/memory/tool-calls",
            json={
                "recallId": recall_id,
                "callId": f"call_{self.calls}",
                "name": name,
                "arguments": arguments,
            },
        )


def declare(project: Project, base_url: str, *, extra: list[dict[str, Any]] | None = None) -> None:
    notes = {"id": "notes", "description": "Notes.", "provider": {"kind": "document"}}
    deploy_reference_provider(project, base_url, extra=[notes, *(extra or [])])


@pytest.fixture
def hosts(live_server: Any, project: Project) -> Iterator[Callable[[], Host]]:
    """Makes agent hosts with a key of the project, and closes their connections.

    A keep-alive connection left open would keep one of the live server's request
    threads waiting until the server has stopped sharing its SQLite connection.
    """
    made: list[Host] = []

    def make() -> Host:
        made.append(Host(live_server.url, api_key_create(project_id=project.id)[1]))
        return made[-1]

    yield make
    for host in made:
        host.client.close()


@pytest.fixture
def host(live_server: Any, project: Project, hosts: Callable[[], Host]) -> Host:
    declare(project, live_server.url)
    return hosts()


def start(host: Host, namespace: str = "owner", access: str = "read-write") -> str:
    response = host.session(
        {"facts": {"scope": "namespace", "id": namespace, "access": access}},
        key=f"{namespace}-{access}",
    )
    assert response.status_code == 201, response.text
    return str(response.json()["session"]["id"])


def test_ordinary_tool_names_match_the_runtime() -> None:
    assert reserved_tool_names() | {SEARCH_TOOL} == set(TOOLS) | set(DOOR_TOOLS)


def test_remember_then_recall_sees_the_fact(host: Host) -> None:
    session_id = start(host)
    first = host.recall(session_id, ["facts"], "hosting")
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["memory"]["facts"] == {"text": "", "sources": [], "writable": True}
    names = {tool["name"] for tool in body["tools"]}
    assert names == {"memory_remember", "memory_search", "memory_forget"}
    remember = next(t for t in body["tools"] if t["name"] == "memory_remember")
    assert remember["inputSchema"]["properties"]["memory"]["enum"] == ["facts"]
    assert "memory" not in remember["inputSchema"].get("required", [])
    recall = Recall.objects.get(pk=body["recallId"])
    assert "facts" in recall.cursors  # kept for tool calls...
    assert "cursor" not in first.text  # ...never shown to the model

    saved = host.tool(
        session_id, body["recallId"], "memory_remember", {"fact": "We host on the free tier."}
    )
    assert saved.status_code == 200, saved.text
    assert saved.json()["result"]["status"] in {"stored", "accepted"}
    assert Fact.objects.filter(text="We host on the free tier.").count() == 1

    second = host.recall(session_id, ["facts"], "Where do we host?")
    assert second.status_code == 200
    memory = second.json()["memory"]["facts"]
    assert "We host on the free tier." in memory["text"]
    assert len(memory["sources"]) == 1


def test_namespaces_are_isolated_and_partition_is_shown(host: Host, project: Project) -> None:
    owner = start(host, "owner")
    other = start(host, "other")
    recall_id = host.recall(owner, ["facts"]).json()["recallId"]
    host.tool(owner, recall_id, "memory_remember", {"fact": "Owner's secret plan."})
    seen = host.recall(other, ["facts"], "plan").json()["memory"]["facts"]
    assert seen["text"] == ""
    inspected = host.client.get(f"{SESSIONS}/{owner}").json()
    entry = inspected["memory"][0]
    assert entry["scope"] == "namespace"
    assert entry["id"] == "owner"
    assert entry["partition"] == partition_key(
        project_id="acme", environment="development", resource_id="facts", namespace="owner"
    )
    assert entry["partition"].startswith("ocmem_v1_")


def test_read_binding_offers_read_tools_and_rejects_writes(host: Host) -> None:
    session_id = start(host, access="read")
    body = host.recall(session_id, ["facts"]).json()
    assert body["memory"]["facts"]["writable"] is False
    assert {t["name"] for t in body["tools"]} == {"memory_search"}
    response = host.tool(session_id, body["recallId"], "memory_remember", {"fact": "x"})
    assert response.status_code == 200
    assert response.json()["result"] == {"status": "rejected", "reason": "not_bound", "bound": []}
    assert not Fact.objects.exists()
    search = host.tool(session_id, body["recallId"], "memory_search", {"query": "anything"})
    assert search.status_code == 200, search.text


def test_unselected_resource_tools_are_rejected(host: Host) -> None:
    session_id = start(host)
    body = host.recall(session_id, []).json()
    assert body["tools"] == []
    response = host.tool(session_id, body["recallId"], "memory_remember", {"fact": "x"})
    assert response.json()["result"]["reason"] == "not_bound"
    assert not Fact.objects.exists()


def test_invalid_provider_arguments_are_a_tool_error(host: Host) -> None:
    session_id = start(host)
    recall_id = host.recall(session_id, ["facts"]).json()["recallId"]
    for arguments in [{"fact": 42}, {"fact": "x", "colour": "red"}, {}, ["fact"]]:
        response = host.tool(session_id, recall_id, "memory_remember", arguments)
        assert response.status_code == 400, arguments
        assert response.json()["error"]["code"] == "invalid_tool_arguments"
    assert not Fact.objects.exists()


def test_unknown_tool_is_400(host: Host) -> None:
    session_id = start(host)
    recall_id = host.recall(session_id, ["facts"]).json()["recallId"]
    response = host.tool(session_id, recall_id, "memory_teleport", {})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


def test_ended_session_cannot_call_provider_tools(host: Host) -> None:
    session_id = start(host)
    recall_id = host.recall(session_id, ["facts"]).json()["recallId"]
    assert host.client.post(f"{SESSIONS}/{session_id}/end").status_code == 200
    response = host.tool(session_id, recall_id, "memory_remember", {"fact": "late"})
    assert response.json()["result"] == {"status": "rejected", "reason": "session_closed"}
    assert not Fact.objects.exists()


def test_failing_provider_blocks_the_recall(host: Host, project: Project) -> None:
    session_id = start(host)
    secret_set(
        project=project,
        environment="development",
        name=TOKEN_SECRET_NAME,
        value="not-the-token",
        origins=[str(host.client.base_url).rstrip("/")],
        server_level=True,
        actor="t",
    )
    before = Recall.objects.count()
    # facts is not selected, yet every bound resource is recalled before render.
    response = host.recall(session_id, [], "anything")
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "recall_failed"
    assert "not-the-token" not in response.text
    assert Recall.objects.count() == before


def test_colliding_tool_schemas_reject_session_creation(
    live_server: Any, project: Project, hosts: Callable[[], Host]
) -> None:
    clash = reference_declaration(resource_id="facts-b", base_url=live_server.url, description="B.")
    changed = copy.deepcopy(clash["provider"]["tools"])
    changed[0]["input"]["properties"]["fact"]["maxLength"] = 10
    clash["provider"]["tools"] = changed
    declare(project, live_server.url, extra=[clash])
    host = hosts()
    response = host.session(
        {
            "facts": {"scope": "namespace", "id": "a"},
            "facts-b": {"scope": "namespace", "id": "a"},
        },
        key="clash",
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "tool_collision"
    assert "memory_remember" in response.json()["error"]["message"]


def test_a_provider_tool_named_as_the_mcp_servers_recall_collides(
    live_server: Any, project: Project, hosts: Callable[[], Host]
) -> None:
    """The MCP server offers memory_recall beside a session's tools: a declared tool
    `recall` (memory_recall to the model) is refused as one named as the runtime's own
    tools is, at a session's creation and at a promotion giving it to a bound resource."""
    recalling = reference_declaration(
        resource_id="facts-b", base_url=live_server.url, description="B."
    )
    recalling["provider"]["tools"] = copy.deepcopy(recalling["provider"]["tools"])
    recalling["provider"]["tools"][1]["name"] = "recall"
    declare(project, live_server.url, extra=[recalling])
    host = hosts()
    response = host.session({"facts-b": {"scope": "namespace", "id": "a"}}, key="recall")
    assert response.status_code == 400, response.text
    assert response.json()["error"] == {
        "code": "tool_collision",
        "message": "Tool memory_recall of 'facts-b' collides with an ordinary tool of that name.",
    }
    assert not Session.objects.exists()

    created = host.session({"facts": {"scope": "namespace", "id": "a"}}, key="facts")
    assert created.status_code == 201, created.text
    session_id = created.json()["session"]["id"]
    changed = copy.deepcopy(recalling)
    changed["id"] = "facts"
    before = dict(Resource.objects.values_list("resource_id", "config"))
    api = APIClient()
    api.credentials(HTTP_X_API_KEY=api_key_create(project_id=project.id)[1])
    promoted = api.post(
        f"/api/managed-agents/projects/{project.id}/deployments",
        {
            "agent": "researcher",
            "memory": [
                changed,
                {"id": "notes", "description": "N.", "provider": {"kind": "document"}},
            ],
            "promote": "development",
        },
        format="json",
    )
    assert promoted.status_code == 400, promoted.content
    error = promoted.json()["error"]
    assert (error["code"], error["details"]) == ("tool_collision", {"session": session_id})
    assert "Tool memory_recall of 'facts' collides" in error["message"]
    assert dict(Resource.objects.values_list("resource_id", "config")) == before


def test_identical_tools_of_two_resources_merge(
    live_server: Any, project: Project, hosts: Callable[[], Host]
) -> None:
    twin = reference_declaration(resource_id="facts-b", base_url=live_server.url, description="B.")
    declare(project, live_server.url, extra=[twin])
    host = hosts()
    created = host.session(
        {
            "facts": {"scope": "namespace", "id": "a", "access": "read-write"},
            "facts-b": {"scope": "namespace", "id": "a", "access": "read-write"},
        },
        key="twins",
    )
    assert created.status_code == 201, created.text
    session_id = created.json()["session"]["id"]
    body = host.recall(session_id, ["facts", "facts-b"]).json()
    remember = next(t for t in body["tools"] if t["name"] == "memory_remember")
    assert remember["inputSchema"]["properties"]["memory"]["enum"] == ["facts", "facts-b"]
    assert "memory" in remember["inputSchema"]["required"]
    ambiguous = host.tool(session_id, body["recallId"], "memory_remember", {"fact": "x"})
    assert ambiguous.status_code == 400
    assert ambiguous.json()["error"]["code"] == "invalid_tool_arguments"
    targeted = host.tool(
        session_id, body["recallId"], "memory_remember", {"fact": "for b", "memory": "facts-b"}
    )
    assert targeted.status_code == 200, targeted.text
    seen_b = host.recall(session_id, ["facts-b"], "b").json()["memory"]
    assert "for b" in seen_b["facts-b"]["text"]
    assert seen_b["facts"]["text"] == ""


def test_a_promotion_whose_tools_collide_in_an_active_session_is_refused(
    live_server: Any, project: Project, hosts: Callable[[], Host]
) -> None:
    """Sessions offer their resources' tools as the resources now declare them: a
    promotion that changes one so that an active session's tools would collide is
    refused as that session's creation would have been, and changes nothing."""
    twin = reference_declaration(resource_id="facts-b", base_url=live_server.url, description="B.")
    declare(project, live_server.url, extra=[twin])
    created = hosts().session(
        {
            "facts": {"scope": "namespace", "id": "a"},
            "facts-b": {"scope": "namespace", "id": "a"},
        },
        key="twins",
    )
    assert created.status_code == 201, created.text
    session_id = created.json()["session"]["id"]
    clash = copy.deepcopy(twin)
    clash["provider"]["tools"][0]["input"]["properties"]["fact"]["maxLength"] = 10
    memory = [
        reference_declaration(resource_id="facts", base_url=live_server.url, description="Facts."),
        clash,
        {"id": "notes", "description": "Notes.", "provider": {"kind": "document"}},
    ]

    def state() -> tuple[Any, ...]:
        return (
            set(Deployment.objects.values_list("id", flat=True)),
            list(ActiveDeployment.objects.values_list("agent", "deployment_id")),
            dict(Resource.objects.values_list("resource_id", "config")),
            AuditEntry.objects.count(),
        )

    api = APIClient()
    api.credentials(HTTP_X_API_KEY=api_key_create(project_id=project.id)[1])
    base = f"/api/managed-agents/projects/{project.id}/deployments"
    before = state()
    # Created and promoted at once, or created first and promoted after: refused alike.
    at_once = api.post(
        base, {"agent": "researcher", "memory": memory, "promote": "development"}, format="json"
    )
    deployment_id = api.post(base, {"agent": "researcher", "memory": memory}, format="json").json()[
        "id"
    ]
    before = (before[0] | {deployment_id}, *before[1:3], before[3] + 1)  # the creation's entry
    promoted = api.post(
        f"{base}/{deployment_id}/promote", {"environment": "development"}, format="json"
    )
    for response in (at_once, promoted):
        assert response.status_code == 400, response.content
        error = response.json()["error"]
        assert error["code"] == "tool_collision"
        assert error["details"] == {"session": session_id}
        assert error["message"].startswith(
            f"With the tools this promotion declares, the tools of active session {session_id} "
            "would collide: Tool memory_remember is declared by 'facts' and 'facts-b' with "
            "different input schemas"
        )
    assert state() == before
    # Once that session has ended, nothing offers the two together: the promotion goes on.
    session_end(session=Session.objects.get(pk=session_id), actor="t")
    promoted = api.post(
        f"{base}/{deployment_id}/promote", {"environment": "development"}, format="json"
    )
    assert promoted.status_code == 200, promoted.content
    facts_b = Resource.objects.get(resource_id="facts-b", environment="development")
    assert facts_b.config["tools"][0]["input"]["properties"]["fact"]["maxLength"] == 10
