"""A session's memory tools in the formats of the major model APIs.

    session = AgentSession(client, session_id)
    recall = session.recall("What did we decide?")      # before each model request
    tools = tools_for(session, format="anthropic")      # or "openai", "openai-responses"
    ...                                                 # the model answers with tool calls
    messages.append(dispatch(session, tool_call))       # the result message to append

The tools are exactly those the server's last recall offered, with their JSON
schemas; the results are the runtime's result objects, as JSON. A tool call
the server refuses as malformed comes back as an error result the model can
correct, not as an exception.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from memoryadmin_client._client import AsyncClient, Client
from memoryadmin_client._ops import ApiError
from memoryadmin_client._types import Recall

Format = Literal["anthropic", "openai", "openai-responses"]
FORMATS: tuple[Format, ...] = ("anthropic", "openai", "openai-responses")


@dataclass(frozen=True)
class ToolCall:
    """A model's tool call, whatever API it came from."""

    format: Format
    id: str
    name: str
    arguments: dict[str, Any] | None  # None: the model sent arguments that are not a JSON object


class _SessionState:
    def __init__(self, session_id: str, use: Sequence[str] | None) -> None:
        self.session_id = session_id
        self.use = list(use) if use is not None else None
        self.last_recall: Recall | None = None

    def _current(self) -> Recall:
        if self.last_recall is None:
            raise RuntimeError("Recall first: the tools and their results belong to a recall.")
        return self.last_recall

    def instructions(self) -> str:
        """The last recall's memory, to put in the model's instructions."""
        parts = []
        for resource, projection in self._current()["memory"].items():
            state = "writable" if projection["writable"] else "read-only"
            parts.append(f"<memory resource={resource!r} {state}>\n{projection['text']}\n</memory>")
        return "\n".join(parts)


class AgentSession(_SessionState):
    """One session as an agent host drives it: recall, then the model's tool calls.

    `use` selects the resources whose tools the model is offered (default: all bound).
    """

    def __init__(self, client: Client, session_id: str, *, use: Sequence[str] | None = None):
        super().__init__(session_id, use)
        self.client = client

    def recall(self, input_text: str | None = None) -> Recall:
        if self.use is None:
            self.use = [b["resource"] for b in self.client.get_session(self.session_id)["memory"]]
        self.last_recall = self.client.recall(self.session_id, use=self.use, input_text=input_text)
        return self.last_recall

    def call(self, name: str, arguments: Mapping[str, Any], call_id: str) -> dict[str, Any]:
        recall_id = self._current()["recallId"]
        return self.client.tool_call(
            self.session_id, recall_id=recall_id, name=name, arguments=arguments, call_id=call_id
        )


class AsyncAgentSession(_SessionState):
    """`AgentSession` over an `AsyncClient`."""

    def __init__(self, client: AsyncClient, session_id: str, *, use: Sequence[str] | None = None):
        super().__init__(session_id, use)
        self.client = client

    async def recall(self, input_text: str | None = None) -> Recall:
        if self.use is None:
            session = await self.client.get_session(self.session_id)
            self.use = [b["resource"] for b in session["memory"]]
        self.last_recall = await self.client.recall(
            self.session_id, use=self.use, input_text=input_text
        )
        return self.last_recall

    async def call(self, name: str, arguments: Mapping[str, Any], call_id: str) -> dict[str, Any]:
        recall_id = self._current()["recallId"]
        return await self.client.tool_call(
            self.session_id, recall_id=recall_id, name=name, arguments=arguments, call_id=call_id
        )


def tools_for(
    session: AgentSession | AsyncAgentSession, format: Format = "anthropic"
) -> list[dict[str, Any]]:
    """The tools of the session's last recall, as `format`'s API declares tools."""
    tools = session._current()["tools"]
    if format == "anthropic":
        return [
            {"name": t["name"], "description": t["description"], "input_schema": t["inputSchema"]}
            for t in tools
        ]
    if format == "openai":
        return [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t["description"],
                    "parameters": t["inputSchema"],
                },
            }
            for t in tools
        ]
    if format == "openai-responses":
        return [
            {
                "type": "function",
                "name": t["name"],
                "description": t["description"],
                "parameters": t["inputSchema"],
            }
            for t in tools
        ]
    raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {format!r}.")


def _plain(value: Any) -> Any:
    """An SDK's response object (pydantic or similar) as plain data."""
    if isinstance(value, Mapping):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump()
    return vars(value)


def _json_object(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except (ValueError, RecursionError):  # not JSON, or nested past what Python reads
            return None
    return dict(raw) if isinstance(raw, Mapping) else None


def tool_call_parse(tool_call: Any) -> ToolCall:
    """An Anthropic `tool_use` block, an OpenAI Chat Completions tool call or a
    Responses `function_call` item (a dict or the SDK's object)."""
    call = _plain(tool_call)
    if call.get("type") == "tool_use":
        return ToolCall("anthropic", call["id"], call["name"], _json_object(call.get("input")))
    if call.get("type") == "function_call":
        return ToolCall(
            "openai-responses", call["call_id"], call["name"], _json_object(call.get("arguments"))
        )
    if "function" in call:
        function = _plain(call["function"])
        return ToolCall("openai", call["id"], function["name"], _json_object(function["arguments"]))
    raise ValueError("Not a tool call of the Anthropic or OpenAI APIs.")


def tool_result_message(
    call: ToolCall, result: Mapping[str, Any], *, error: bool = False
) -> dict[str, Any]:
    """The message (or Responses input item) that hands `result` back to the model."""
    content = json.dumps(result, ensure_ascii=False)
    if call.format == "anthropic":
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.id, "content": content}
        if error:
            block["is_error"] = True
        return {"role": "user", "content": [block]}
    if call.format == "openai":
        return {"role": "tool", "tool_call_id": call.id, "content": content}
    return {"type": "function_call_output", "call_id": call.id, "output": content}


def _bad_arguments(call: ToolCall) -> dict[str, Any]:
    return tool_result_message(
        call,
        {
            "error": {
                "code": "invalid_tool_arguments",
                "message": "Arguments must be a JSON object.",
            }
        },
        error=True,
    )


# The server's refusals of what the model wrote: malformed (400), or arguments past the
# body limit (413): error results the model can act on. Anything else is the host's.
MODEL_REFUSALS = (400, 413)


def _refused(call: ToolCall, exc: ApiError) -> dict[str, Any]:
    """A call the server refused for what the model wrote: an error result."""
    if exc.status not in MODEL_REFUSALS:
        raise exc
    return tool_result_message(
        call, {"error": {"code": exc.code, "message": exc.message}}, error=True
    )


def dispatch(session: AgentSession, tool_call: Any) -> dict[str, Any]:
    """Runs a model's memory tool call; returns the tool-result message to append."""
    call = tool_call_parse(tool_call)
    if call.arguments is None:
        return _bad_arguments(call)
    try:
        result = session.call(call.name, call.arguments, call.id)
    except ApiError as exc:
        return _refused(call, exc)
    return tool_result_message(call, result)


async def adispatch(session: AsyncAgentSession, tool_call: Any) -> dict[str, Any]:
    """`dispatch` for an `AsyncAgentSession`."""
    call = tool_call_parse(tool_call)
    if call.arguments is None:
        return _bad_arguments(call)
    try:
        result = await session.call(call.name, call.arguments, call.id)
    except ApiError as exc:
        return _refused(call, exc)
    return tool_result_message(call, result)
