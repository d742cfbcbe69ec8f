"""`manage.py records`: external providers' records from the command line."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from memoryadmin.memory.models import AuditEntry, Project, Resource
from tests.fake_providers import FakeMem0Oss
from tests.helpers import deploy_external


@pytest.fixture
def mem(project: Project, mem0_oss: FakeMem0Oss) -> Resource:
    return deploy_external(
        project,
        {
            "kind": "mem0-oss",
            "baseUrl": mem0_oss.origin,
            "headers": {"X-API-Key": {"secret": "MEM0_KEY"}},
        },
        secrets_by_origin={mem0_oss.origin: {"MEM0_KEY": "mem0-test-key"}},
    )


def run(*args: str) -> str:
    out = StringIO()
    call_command("records", "--project", "acme", *args, stdout=out)
    return out.getvalue()


def test_list_show_edit_history_and_remove(mem: Resource, mem0_oss: FakeMem0Oss) -> None:
    external = mem0_oss.seed("Ships on Fridays.", user_id="team")
    listed = json.loads(run("--json", "list", "mem", "--namespace", "team"))
    record_id = listed["records"][0]["id"]
    assert listed["records"][0]["metadata"]["providerExternalId"] == external
    assert "Ships on Fridays." in run("show", "mem", record_id, "--namespace", "team")
    assert run("edit", "mem", record_id, "--namespace", "team", "--text", "Ships on Mondays.")
    assert mem0_oss.memories[external]["memory"] == "Ships on Mondays."
    history = run("history", "mem", record_id, "--namespace", "team")
    assert "update  Ships on Mondays." in history
    with pytest.raises(CommandError) as refused:
        run("remove", "mem", record_id, "--namespace", "team")
    assert refused.value.returncode == 6
    assert external in mem0_oss.memories
    assert run("remove", "mem", record_id, "--namespace", "team", "--yes").startswith("deleted")
    assert mem0_oss.memories == {}
    assert AuditEntry.objects.filter(action="record.delete", actor__startswith="cli:").exists()


def test_add_and_search(mem: Resource, mem0_oss: FakeMem0Oss) -> None:
    assert run(
        "add", "mem", "--namespace", "team", "--text", "Deploys need two reviews."
    ).startswith("stored")
    found = run("list", "mem", "--namespace", "team", "--search", "reviews")
    assert "Deploys need two reviews." in found


def test_document_resources_are_refused_with_the_invalid_input_code(notes: Any) -> None:
    with pytest.raises(CommandError) as refused:
        run("list", "notes", "--namespace", "team")
    assert refused.value.returncode == 6
    assert "keeps documents here" in str(refused.value)
