"""An example agent host: the process that runs a model and gives it memory.

No model is needed: a scripted "model" stands in for one. The host

1. opens a topic: creates the document (if new) and a session bound to it,
2. recalls memory before each model request and shows it to the model,
3. forwards the model's memory_save calls and hands the results back,
4. meets a conflict (someone edited the notes meanwhile), recalls again, and
   lets the model reconcile, which then saves successfully.

Run it against the demo server (`make run` in another terminal):

    .venv/bin/python examples/agent_host.py

Options: --base-url, --api-key (default: $MEMORYADMIN_API_KEY or var/demo-api-key),
--project (default: demo), --agent (default: support-bot), --document.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "clients" / "python" / "src"))

from scripted import run  # noqa: E402

from memoryadmin_client import Client, Recall  # noqa: E402


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]


class ScriptedModel:
    """Answers like a model would, from a script instead of weights."""

    def __init__(self, decision: str) -> None:
        self.decision = decision

    def respond(self, memory_text: str, tools: list[str]) -> list[ToolCall]:
        if "memory_save" not in tools or self.decision in memory_text:
            return []
        text = (memory_text.rstrip("\n") + "\n" if memory_text else "") + self.decision + "\n"
        return [ToolCall("memory_save", {"text": text, "summary": "Decisions so far."})]


class Host:
    def __init__(self, client: Client, session_id: str, resource: str, out: Any) -> None:
        self.client = client
        self.session_id = session_id
        self.resource = resource
        self.out = out

    def say(self, line: str) -> None:
        print(line, file=self.out)

    def recall(self, turn: int) -> Recall:
        recall = self.client.recall(
            self.session_id, use=[self.resource], input_text="Record today's decision."
        )
        memory = recall["memory"][self.resource]
        sources = ", ".join(f"{s['id']}@{s['revision'][:8]}" for s in memory["sources"])
        self.say(
            f"turn {turn}: recalled {recall['recallId']} ({sources}), tools: "
            + ", ".join(t["name"] for t in recall["tools"])
        )
        return recall

    def run_tools(self, recall: Recall, calls: list[ToolCall]) -> list[dict[str, Any]]:
        results = []
        for call in calls:
            result = self.client.tool_call(
                self.session_id,
                recall_id=recall["recallId"],
                name=call.name,
                arguments=call.arguments,
            )
            detail = {k: v for k, v in result.items() if k not in ("status", "text", "summary")}
            self.say(f"  {call.name} -> {result['status']} {detail if detail else ''}".rstrip())
            results.append(result)
        return results


def main(argv: list[str] | None = None, out: Any = sys.stdout) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--api-key", default=os.environ.get("MEMORYADMIN_API_KEY"))
    parser.add_argument("--project", default="demo")
    parser.add_argument("--agent", default="support-bot")
    parser.add_argument("--resource", default="notes")
    parser.add_argument("--document", default="agent-host-example")
    args = parser.parse_args(argv)
    api_key = args.api_key
    if api_key is None:
        key_file = ROOT / "var" / "demo-api-key"
        if not key_file.exists():
            parser.error("pass --api-key (or run `make run` once to create the demo key)")
        api_key = key_file.read_text().strip()

    with Client(args.base_url, api_key, project=args.project) as client:
        started = client.start_session_on_document(
            agent=args.agent,
            resource=args.resource,
            document_id=args.document,
            document={"title": "Agent host example"},
            idempotency_key=f"example/{secrets.token_hex(6)}",
        )
        session = started["session"]["session"]
        made = "created" if started["document"]["created"] else "existing"
        print(f"session {session['id']} on {args.resource}/{args.document} ({made})", file=out)
        host = Host(client, session["id"], args.resource, out)
        model = ScriptedModel(f"- Decided: exercises run on Node.js 22 ({secrets.token_hex(3)}).")

        # Turn 1: an ordinary save.
        recall = host.recall(1)
        tools = [tool["name"] for tool in recall["tools"]]
        first = host.run_tools(
            recall, model.respond(recall["memory"][args.resource]["text"], tools)
        )

        # Turn 2: the model answers from its recall, but an owner edits the notes
        # before the save arrives, so the save meets a conflict.
        recall = host.recall(2)
        model.decision += " Confirmed."
        calls = model.respond(recall["memory"][args.resource]["text"], tools)
        current = client.get_document(args.resource, args.document)
        client.replace_document(
            args.resource,
            args.document,
            revision=current["revision"],
            text=current["text"] + "- Owner: the room is booked.\n",
        )
        host.say("  (an owner edited the notes meanwhile)")
        second = host.run_tools(recall, calls)

        # Turn 3: recall the current notes; the model reconciles and saves.
        recall = host.recall(3)
        third = host.run_tools(
            recall, model.respond(recall["memory"][args.resource]["text"], tools)
        )

        client.end_session(session["id"])
        events = [f"{e['seq']} {e['type']}" for e in client.iter_session_events(session["id"])]
        host.say("events: " + ", ".join(events))
        final = client.get_document(args.resource, args.document)
        host.say("notes now:\n" + final["text"])

    statuses = [r["status"] for r in first + second + third]
    if statuses != ["saved", "conflict", "saved"]:
        host.say(f"unexpected outcomes: {statuses}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
