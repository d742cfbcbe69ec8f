"""Tool adapters for model APIs: the session's tools in each API's format, a model's tool
calls dispatched to the runtime over real HTTP, and the example loops run offline."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from memoryadmin.agents.models import Session, SessionEvent
from memoryadmin.memory.models import Document, Project, Resource
from memoryadmin.memory.services.keys import api_key_create
from memoryadmin_client import AgentSession, Client, dispatch, tool_call_parse, tools_for
from tests.helpers import run_example

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["anthropic_messages.py", "openai_chat.py", "openai_responses.py"]


@pytest.fixture
def api_key(project: Project) -> str:
    return api_key_create(project_id=project.id)[1]


@pytest.fixture
def agent(live_server: Any, api_key: str, notes: Resource) -> Iterator[AgentSession]:
    """A session bound to notes/workshop (read-write) and the kb collection, recalled once."""
    with Client(live_server.url, api_key, project="acme") as client:
        client.create_document("notes", "workshop", title="Workshop", text="v1")
        created = client.create_session(
            agent="support-bot",
            idempotency_key="adapters",
            memory={
                "notes": {"scope": "document", "id": "workshop", "access": "read-write"},
                "kb": {"scope": "collection"},
            },
        )
        session = AgentSession(client, created["session"]["id"])
        session.recall("hello")
        yield session


def anthropic_call(name: str, arguments: Any, call_id: str = "toolu_1") -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def test_tools_in_each_format_are_the_recalls_tools(agent: AgentSession) -> None:
    assert agent.last_recall is not None
    tools = agent.last_recall["tools"]
    assert [t["name"] for t in tools] == ["memory_save", "memory_list", "memory_read"]
    assert tools_for(agent, format="anthropic") == [
        {"name": t["name"], "description": t["description"], "input_schema": t["inputSchema"]}
        for t in tools
    ]
    assert tools_for(agent, format="openai") == [
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
    responses = tools_for(agent, format="openai-responses")
    assert [(t["type"], t["name"], t["parameters"]) for t in responses] == [
        ("function", t["name"], t["inputSchema"]) for t in tools
    ]
    with pytest.raises(ValueError, match="format must be one of"):
        tools_for(agent, format="gemini")  # type: ignore[arg-type]
    # The session recalled all its bound resources (use defaulted to them).
    assert agent.use == ["kb", "notes"]
    assert "<memory resource='notes' writable>\nv1\n</memory>" in agent.instructions()


def test_dispatch_in_every_format_returns_the_result_message(
    agent: AgentSession, notes: Resource
) -> None:
    save = {"text": "v2", "memory": "notes"}
    message = dispatch(agent, anthropic_call("memory_save", save))
    assert message["role"] == "user"
    [block] = message["content"]
    assert (block["type"], block["tool_use_id"]) == ("tool_result", "toolu_1")
    assert json.loads(block["content"])["status"] == "saved"
    # A second save under the same recall meets a conflict with the current text.
    chat_call = {
        "id": "call_2",
        "type": "function",
        "function": {"name": "memory_save", "arguments": json.dumps({"text": "v3"})},
    }
    message = dispatch(agent, chat_call)
    assert (message["role"], message["tool_call_id"]) == ("tool", "call_2")
    assert json.loads(message["content"]) == {"status": "conflict", "text": "v2", "summary": ""}
    responses_call = {
        "type": "function_call",
        "call_id": "call_3",
        "name": "memory_read",
        "arguments": json.dumps({"id": "workshop"}),
    }
    item = dispatch(agent, responses_call)
    assert (item["type"], item["call_id"]) == ("function_call_output", "call_3")
    # memory_read is the kb collection's, which has no such document.
    assert json.loads(item["output"]) == {"status": "rejected", "reason": "not_found"}
    assert Document.objects.get(resource=notes, doc_id="workshop").text == "v2"


def test_sdk_objects_are_accepted() -> None:
    class Dumps:
        def model_dump(self) -> dict[str, Any]:
            return anthropic_call("memory_save", {"text": "x"})

    assert tool_call_parse(Dumps()).arguments == {"text": "x"}
    function = SimpleNamespace(name="memory_list", arguments="")
    call = tool_call_parse(SimpleNamespace(id="c", type="function", function=function))
    assert (call.format, call.name, call.arguments) == ("openai", "memory_list", {})
    with pytest.raises(ValueError, match="Not a tool call"):
        tool_call_parse({"type": "text", "text": "hi"})


def test_malformed_calls_come_back_as_errors_the_model_can_fix(
    agent: AgentSession, notes: Resource
) -> None:
    not_json = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "memory_save", "arguments": "{not json"},
    }
    assert json.loads(dispatch(agent, not_json)["content"])["error"]["code"] == (
        "invalid_tool_arguments"
    )
    message = dispatch(agent, anthropic_call("memory_save", {"memory": "notes", "txt": "v2"}))
    [block] = message["content"]
    assert block["is_error"] is True
    error = json.loads(block["content"])["error"]
    assert error["code"] == "invalid_tool_arguments"
    assert "txt" in error["message"]
    assert Document.objects.get(resource=notes, doc_id="workshop").text == "v1"


@pytest.mark.parametrize(
    ("call", "code"),
    [
        # Nested deeper than any JSON reader reads: the host's parser gives up on it.
        (
            {
                "id": "call_1",
                "type": "function",
                "function": {
                    "name": "memory_save",
                    "arguments": '{"text": ' + "[" * 100_000 + "]" * 100_000 + "}",
                },
            },
            "invalid_tool_arguments",
        ),
        # An unpaired surrogate, escaped in the model's JSON or already parsed.
        (
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "memory_save", "arguments": '{"text": "a\\ud800"}'},
            },
            "invalid_request",
        ),
        (anthropic_call("memory_save", {"memory": "notes", "text": "a\udfff"}), "invalid_request"),
        # Not JSON, though Python's reader takes it.
        (
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "memory_save", "arguments": '{"text": NaN}'},
            },
            "invalid_request",
        ),
        (
            anthropic_call("memory_save", {"memory": "notes", "text": float("inf")}),
            "invalid_request",
        ),
        # Arguments past the body limit: the model can write less.
        (
            anthropic_call("memory_save", {"memory": "notes", "text": "x" * 100_000}),
            "memory_limit_exceeded",
        ),
    ],
)
def test_hostile_arguments_come_back_as_errors_and_change_nothing(
    agent: AgentSession, notes: Resource, call: dict[str, Any], code: str
) -> None:
    message = dispatch(agent, call)
    if call.get("type") == "tool_use":
        [block] = message["content"]
        assert block["is_error"] is True
        content = block["content"]
    else:
        content = message["content"]
    assert json.loads(content)["error"]["code"] == code
    document = Document.objects.get(resource=notes, doc_id="workshop")
    assert (document.text, document.writer_kind) == ("v1", "owner")
    assert not SessionEvent.objects.filter(type="memory.saved").exists()


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_loops_run_offline(
    live_server: Any, api_key: str, notes: Resource, example: str
) -> None:
    completed = run_example(example, live_server.url, api_key)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0].startswith('memory_save -> {"status": "saved"')
    assert lines[-1] == "Noted."
    document = Document.objects.get(resource=notes)
    assert document.text == "- Decided: exercises run on Node.js 22.\n"
    assert (document.writer_kind, document.writer_session_id) == ("agent", Session.objects.get().id)


@pytest.mark.parametrize("example", [*EXAMPLES, "agent_host.py"])
def test_an_example_without_a_server_says_so_in_one_line(project: Project, example: str) -> None:
    """Nothing answers at the base URL (a port bound but not listening refuses every
    connection): one line naming the URL and --base-url, exit code 1, no traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        base_url = f"http://127.0.0.1:{taken.getsockname()[1]}"
        completed = run_example(example, base_url, "mak_unused")
    assert completed.returncode == 1, completed.stderr
    assert completed.stdout == ""
    assert completed.stderr.startswith(f"error: no memoryadmin server answered at {base_url} (")
    assert completed.stderr.endswith("start one with `make run`, or pass --base-url\n")
    assert completed.stderr.count("\n") == 1, completed.stderr
    assert not Session.objects.exists()


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_glue_is_under_thirty_lines(example: str) -> None:
    source = (ROOT / "examples" / example).read_text()
    glue = source.split("def main", 1)[1].split('if __name__ == "__main__"', 1)[0]
    assert len(glue.strip().splitlines()) < 30
