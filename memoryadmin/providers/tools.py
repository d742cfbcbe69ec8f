"""The tools an http provider declares, found on its resource."""

from __future__ import annotations

from memoryadmin.core.errors import ToolNotPermitted
from memoryadmin.core.tools import Tool
from memoryadmin.memory.models import Resource
from memoryadmin.providers.declarations import HTTP_KIND


def http_tools(resource: Resource) -> list[Tool]:
    if resource.kind != HTTP_KIND:
        return []
    return list(resource.config.get("tools", []))


def http_tool_get(*, resource: Resource, name: str) -> Tool:
    """The declared tool; endpoints cannot add tools beyond the declaration."""
    for tool in http_tools(resource):
        if tool["name"] == name:
            return tool
    raise ToolNotPermitted(f"Resource '{resource.resource_id}' declares no tool '{name}'.")
