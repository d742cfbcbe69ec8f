"""Declared tools of every kind: access, argument validation, merging, model definitions.

A declared tool `remember` appears to the model as `memory_remember`. Its
optional `memory` argument selects the resource; the host strips it and
validates the rest against the declared schema before anything is sent.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable
from typing import Any

from memoryadmin.core.errors import InvalidToolArguments, ToolCollision

TOOL_PREFIX = "memory_"
Tool = dict[str, Any]
# memory_<name> -> [(resource id, declared tool)], in the order the targets were given.
ToolTargets = list[tuple[str, Tool]]


def tool_retryable(tool: Tool) -> bool:
    """Reads are side-effect free; a write is retried only when declared idempotent."""
    return bool(tool["access"] == "read" or tool.get("idempotent", False))


def tool_arguments_validate(*, tool: Tool, arguments: object) -> dict[str, Any]:
    """The provider's arguments: `memory` stripped, the rest valid under the declared schema."""
    if not isinstance(arguments, dict):
        raise InvalidToolArguments(f"memory_{tool['name']}: arguments must be a JSON object.")
    provider_arguments = {k: v for k, v in arguments.items() if k != "memory"}
    # Imported here: only tool calls need jsonschema, not every process that starts.
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    validator = Draft202012Validator(tool["input"])
    error = best_match(validator.iter_errors(provider_arguments))
    if error is not None:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.path)
        raise InvalidToolArguments(
            f"memory_{tool['name']}: arguments{where}: {error.message}",
            details={"path": list(error.path)},
        )
    return provider_arguments


def http_tools_merge(
    *, targets: Iterable[tuple[str, Iterable[Tool]]], reserved: Collection[str] = ()
) -> dict[str, ToolTargets]:
    """Groups the tools of several resources by their model-facing name.

    Identical names merge only with identical input schemas; each target keeps
    its own description, access and retry policy. A name that collides with an
    ordinary tool (`reserved`, such as memory_save) or an incompatible schema
    raises ToolCollision, which rejects session creation.
    """
    merged: dict[str, ToolTargets] = {}
    for resource_id, tools in targets:
        for tool in tools:
            name = TOOL_PREFIX + tool["name"]
            if name in reserved:
                raise ToolCollision(
                    f"Tool {name} of '{resource_id}' collides with an ordinary tool of that name."
                )
            entries = merged.setdefault(name, [])
            if entries and entries[0][1]["input"] != tool["input"]:
                raise ToolCollision(
                    f"Tool {name} is declared by '{entries[0][0]}' and '{resource_id}' with "
                    "different input schemas; identical names merge only with identical schemas."
                )
            entries.append((resource_id, tool))
    return merged


def http_tool_definition(*, name: str, targets: ToolTargets) -> dict[str, Any]:
    """What the model sees: the declared schema plus the `memory` target argument.

    `memory` is required only when more than one resource offers the tool.
    """
    schema = copy.deepcopy(targets[0][1]["input"])
    names = [resource_id for resource_id, _ in targets]
    properties = schema.setdefault("properties", {})
    properties["memory"] = {
        "type": "string",
        "enum": names,
        "description": "The memory resource to use.",
    }
    if len(names) > 1:
        schema["required"] = [*schema.get("required", []), "memory"]
    described = "\n".join(
        f"{resource_id} ({tool['access']}): {tool['description'].strip()}"
        for resource_id, tool in targets
    )
    return {"name": name, "description": described, "inputSchema": schema}
