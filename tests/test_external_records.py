"""Records of external providers as owners and sessions reach them, against the fake servers
of tests/fake_providers.py: namespaces that share one provider partition."""

from __future__ import annotations

from typing import Any

from rest_framework.test import APIClient

from memoryadmin.agents.services.runtime import recall_create, tool_call
from memoryadmin.external.models import ExternalRecord
from memoryadmin.memory.models import Project
from tests.fake_providers import FakeHindsight, FakeMem0Oss
from tests.helpers import DEV, deploy_external, external_session

RECORDS = "/api/managed-agents/projects/acme/memory/mem/records"
ALICE = DEV + "&namespace=alice"
MEM0_KEY = "mem0-test-key"
HINDSIGHT_TOKEN = "hindsight-test"


def mem0_declaration(server: FakeMem0Oss, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "mem0-oss",
        "baseUrl": server.origin,
        "scope": {"user_id": "{namespace}", "agent_id": "archivist"},
        "headers": {"X-API-Key": {"secret": "MEM0_KEY"}},
        **extra,
    }


# Namespaces sharing one partition (spec 004: get, update, history and delete resolve the
# provider identifier of a record in every namespace that shows it).


def test_namespaces_sharing_a_partition_resolve_its_records_alike(
    api: APIClient, project: Project, mem0_oss: FakeMem0Oss
) -> None:
    """A fixed scope (which declarations allow) puts every namespace in one Mem0 user: a
    record seen in a second namespace is read, updated, shown with its history and deleted
    there as well, under the same id."""
    deploy_external(
        project,
        mem0_declaration(mem0_oss, scope={"user_id": "team", "agent_id": "archivist"}),
        secrets_by_origin={mem0_oss.origin: {"MEM0_KEY": MEM0_KEY}},
    )
    made = api.post(RECORDS + ALICE, {"text": "The team meets on Mondays."}, format="json")
    assert made.status_code == 201, made.json()
    record_id = made.json()["records"][0]["id"]
    [external] = mem0_oss.memories
    bob = DEV + "&namespace=bob"
    assert [r["id"] for r in api.get(RECORDS + bob).json()["records"]] == [record_id]

    one = api.get(f"{RECORDS}/{record_id}{bob}")
    assert one.status_code == 200, one.json()
    assert one.json()["text"] == "The team meets on Mondays."
    updated = api.patch(
        f"{RECORDS}/{record_id}{bob}", {"text": "The team meets on Tuesdays."}, format="json"
    )
    assert updated.status_code == 200, updated.json()
    assert mem0_oss.memories[external]["memory"] == "The team meets on Tuesdays."
    history = api.get(f"{RECORDS}/{record_id}/history{bob}")
    assert history.status_code == 200, history.json()
    assert [h["action"] for h in history.json()["history"]] == ["create", "update"]
    # The namespace that saw it first still resolves it.
    assert api.get(f"{RECORDS}/{record_id}{ALICE}").json()["text"] == "The team meets on Tuesdays."
    assert sorted(
        ExternalRecord.objects.filter(record_id=record_id).values_list("namespace", flat=True)
    ) == ["alice", "bob"]

    deleted = api.delete(f"{RECORDS}/{record_id}{bob}")
    assert deleted.status_code == 200, deleted.json()
    assert mem0_oss.memories == {}
    # Gone at the provider, so gone from every namespace that saw it.
    assert not ExternalRecord.objects.filter(record_id=record_id).exists()
    assert api.get(f"{RECORDS}/{record_id}{ALICE}").status_code == 404


def test_a_fixed_bank_shares_its_records_with_every_namespace(
    api: APIClient, project: Project, hindsight: FakeHindsight
) -> None:
    """With a fixed bankId every namespace reaches one bank: a fact listed in one namespace
    and recalled in another session's namespace is read and forgotten there."""
    deploy_external(
        project,
        {
            "kind": "hindsight",
            "baseUrl": hindsight.origin,
            "bankId": "shared",
            "headers": {"Authorization": {"secret": "HINDSIGHT_TOKEN", "scheme": "Bearer"}},
        },
        secrets_by_origin={hindsight.origin: {"HINDSIGHT_TOKEN": HINDSIGHT_TOKEN}},
    )
    [unit] = hindsight.seed("shared", "The office closes at six.")
    [listed] = api.get(RECORDS + ALICE).json()["records"]
    session = external_session(project, "bob")
    recall = recall_create(session=session, use=["mem"], input_text="When does the office close?")
    [source] = recall["memory"]["mem"]["sources"]
    assert source["id"] == listed["id"]
    one = api.get(f"{RECORDS}/{listed['id']}{DEV}&namespace=bob")
    assert one.status_code == 200, one.json()
    assert one.json()["metadata"]["providerExternalId"] == unit
    forgotten = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c1",
        name="memory_forget",
        arguments={"id": source["id"]},
    )
    assert forgotten == {"status": "deleted", "id": source["id"]}
    assert hindsight.units("shared") == []
    assert not ExternalRecord.objects.filter(record_id=source["id"]).exists()
