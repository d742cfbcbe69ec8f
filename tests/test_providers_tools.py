"""Partition keys, tool arguments, tool merging and the definitions the model sees."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from memoryadmin.core.errors import InvalidToolArguments, ToolCollision
from memoryadmin.core.partitions import PARTITION_PREFIX, partition_key
from memoryadmin.core.tools import (
    http_tool_definition,
    http_tools_merge,
    tool_arguments_validate,
    tool_retryable,
)

# Long, distinctive inputs: a short one (say "o") turns up in a random digest by chance.
KEY = {
    "project_id": "acme-project",
    "environment": "development",
    "resource_id": "knowledge-base",
    "namespace": "owner-namespace",
}
INPUT = {
    "type": "object",
    "properties": {"fact": {"type": "string", "maxLength": 10}},
    "required": ["fact"],
    "additionalProperties": False,
}


def tool(name: str = "remember", access: str = "write", **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"{name} things.",
        "access": access,
        "idempotent": False,
        "input": copy.deepcopy(INPUT),
        **fields,
    }


def test_partition_key_is_stable_and_opaque() -> None:
    key = partition_key(**KEY)
    assert key == partition_key(**KEY)
    assert key.startswith(PARTITION_PREFIX)
    assert len(key) == len(PARTITION_PREFIX) + 43
    for value in KEY.values():
        assert value not in key.removeprefix(PARTITION_PREFIX)


@pytest.mark.parametrize(
    "change",
    [
        {"project_id": "globex"},
        {"environment": "production"},
        {"resource_id": "notes"},
        {"namespace": "other"},
        # The inputs cannot run into each other.
        {"resource_id": "knowledge-base-owner-namespace", "namespace": ""},
    ],
)
def test_partition_key_differs_when_any_input_differs(change: dict[str, str]) -> None:
    assert partition_key(**{**KEY, **change}) != partition_key(**KEY)


def test_partition_key_follows_the_partition_secret(settings: Any) -> None:
    derived = partition_key(**KEY)
    settings.MEMORYADMIN_PARTITION_SECRET = "a-dedicated-secret"
    dedicated = partition_key(**KEY)
    assert dedicated != derived
    settings.SECRET_KEY = "rotated"
    assert partition_key(**KEY) == dedicated


def test_arguments_lose_memory_and_are_validated() -> None:
    assert tool_arguments_validate(tool=tool(), arguments={"fact": "x", "memory": "kb"}) == {
        "fact": "x"
    }


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({}, "'fact' is a required property"),
        ({"fact": "x" * 11}, "arguments.fact"),
        ({"fact": "x", "other": 1}, "Additional properties are not allowed"),
        ({"fact": 3}, "is not of type 'string'"),
        ("fact", "must be a JSON object"),
    ],
)
def test_invalid_arguments_are_invalid_tool_arguments(arguments: Any, problem: str) -> None:
    with pytest.raises(InvalidToolArguments) as raised:
        tool_arguments_validate(tool=tool(), arguments=arguments)
    assert raised.value.code == "invalid_tool_arguments"
    assert raised.value.status == 400
    assert problem in raised.value.message


def test_retry_policy() -> None:
    read, write = tool("search", "read"), tool()
    assert tool_retryable(read)
    assert not tool_retryable(write)
    assert tool_retryable(tool(idempotent=True))


def test_identical_names_with_identical_schemas_merge_keeping_each_policy() -> None:
    merged = http_tools_merge(
        targets=[
            ("kb", [tool(idempotent=True)]),
            ("notes-remote", [tool(), tool("search", "read")]),
        ]
    )
    assert list(merged) == ["memory_remember", "memory_search"]
    assert [(rid, t["idempotent"]) for rid, t in merged["memory_remember"]] == [
        ("kb", True),
        ("notes-remote", False),
    ]
    definition = http_tool_definition(name="memory_remember", targets=merged["memory_remember"])
    assert definition["inputSchema"]["properties"]["memory"]["enum"] == ["kb", "notes-remote"]
    assert definition["inputSchema"]["required"] == ["fact", "memory"]
    assert "kb (write): remember things." in definition["description"]
    single = http_tool_definition(name="memory_search", targets=merged["memory_search"])
    assert single["inputSchema"]["required"] == ["fact"]
    # The declaration itself is left untouched.
    assert "memory" not in merged["memory_remember"][0][1]["input"]["properties"]


def test_identical_names_with_different_schemas_collide() -> None:
    other = tool(input={"type": "object", "properties": {"text": {"type": "string"}}})
    with pytest.raises(ToolCollision, match="different input schemas"):
        http_tools_merge(targets=[("kb", [tool()]), ("remote", [other])])


def test_names_of_ordinary_tools_collide() -> None:
    with pytest.raises(ToolCollision, match="memory_save"):
        http_tools_merge(targets=[("kb", [tool("save")])], reserved={"memory_save"})
