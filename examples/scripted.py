"""What the model-API examples share: a session to talk to, and scripted models that
answer in the shape of each API (no model, no network beyond the memoryadmin server).

A scripted model reads the memory in its instructions; while the decision it was
given is not there it calls memory_save with the notes plus the decision, and
once the save came back `saved` it answers in text. A `conflict` makes it save
again on top of the current text the result carries.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "clients" / "python" / "src"))

from memoryadmin_client import AgentSession, Client  # noqa: E402

DECISION = "- Decided: exercises run on Node.js 22."
QUESTION = "Please note the decision: exercises run on Node.js 22."


def run(main: Callable[[], int]) -> int:
    """main()'s exit code; a server that does not answer is one line on stderr and 1,
    not a traceback."""
    try:
        return main()
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        url = exc.request.url
        print(
            f"error: no memoryadmin server answered at {url.scheme}://{url.netloc.decode()} "
            f"({exc}); start one with `make run`, or pass --base-url",
            file=sys.stderr,
        )
        return 1


def connect(argv: list[str] | None, doc: str) -> AgentSession:
    """A session on a fresh document of the demo project (or the one named by the options)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--api-key", default=os.environ.get("MEMORYADMIN_API_KEY"))
    parser.add_argument("--project", default="demo")
    parser.add_argument("--agent", default="support-bot")
    args = parser.parse_args(argv)
    key_file = ROOT / "var" / "demo-api-key"
    if args.api_key is None and not key_file.exists():
        parser.error("pass --api-key (or run `make run` once to create the demo key)")
    api_key = args.api_key or key_file.read_text().strip()
    client = Client(args.base_url, api_key, project=args.project)
    topic = f"example-{secrets.token_hex(4)}"
    started = client.start_session_on_document(
        agent=args.agent, resource="notes", document_id=topic, idempotency_key=topic
    )
    return AgentSession(client, started["session"]["session"]["id"], use=["notes"])


class ScriptedModel:
    """The decisions of a model, whatever API it speaks."""

    def __init__(self) -> None:
        self.turn = 0

    def decide(self, instructions: str, results: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Arguments for memory_save, or None to answer in text."""
        self.turn += 1
        last = results[-1] if results else None
        if last is not None and last.get("status") == "saved":
            return None
        notes = last["text"] if last is not None and last.get("status") == "conflict" else None
        if notes is None:
            if DECISION in instructions:
                return None
            notes = instructions.split("\n", 1)[1].rsplit("\n", 1)[0]
        text = (notes.rstrip("\n") + "\n" if notes.strip() else "") + DECISION + "\n"
        return {"text": text, "summary": "Decisions so far."}


def _results(contents: list[str]) -> list[dict[str, Any]]:
    return [json.loads(content) for content in contents]


class ScriptedAnthropic(ScriptedModel):
    """Answers as `anthropic.Anthropic().messages.create(...)` does, as plain data."""

    def create(self, *, system: str, tools: list[dict[str, Any]], messages: list[Any]) -> Any:
        assert all({"name", "description", "input_schema"} <= set(t) for t in tools)
        blocks = [b for m in messages if m["role"] == "user" for b in m["content"]]
        done = _results([b["content"] for b in blocks if b["type"] == "tool_result"])
        save = self.decide(system, done)
        if save is None:
            return {"stop_reason": "end_turn", "content": [{"type": "text", "text": "Noted."}]}
        call = {"type": "tool_use", "id": f"toolu_{self.turn}", "name": "memory_save"}
        return {"stop_reason": "tool_use", "content": [{**call, "input": save}]}


class ScriptedOpenAIChat(ScriptedModel):
    """Answers as `openai.OpenAI().chat.completions.create(...)` does, as plain data."""

    def create(self, *, tools: list[dict[str, Any]], messages: list[dict[str, Any]]) -> Any:
        assert all(t["type"] == "function" and "parameters" in t["function"] for t in tools)
        done = _results([m["content"] for m in messages if m["role"] == "tool"])
        save = self.decide(messages[0]["content"], done)
        message: dict[str, Any] = {"role": "assistant", "content": "Noted.", "tool_calls": None}
        if save is not None:
            function = {"name": "memory_save", "arguments": json.dumps(save)}
            call = {"id": f"call_{self.turn}", "type": "function", "function": function}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return {"choices": [{"message": message}]}


class ScriptedOpenAIResponses(ScriptedModel):
    """Answers as `openai.OpenAI().responses.create(...)` does, as plain data."""

    def create(self, *, instructions: str, tools: list[dict[str, Any]], input: list[Any]) -> Any:
        assert all(t["type"] == "function" and "parameters" in t for t in tools)
        outputs = [i["output"] for i in input if i.get("type") == "function_call_output"]
        save = self.decide(instructions, _results(outputs))
        if save is None:
            return {"output": [{"type": "message", "role": "assistant", "content": "Noted."}]}
        call = {"type": "function_call", "call_id": f"call_{self.turn}", "name": "memory_save"}
        return {"output": [{**call, "arguments": json.dumps(save)}]}
