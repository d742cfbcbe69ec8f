"""`manage.py mcp`: an agent session's memory as a Model Context Protocol server.

Over stdio (the default) it serves one session, created with an idempotency key
so a restarted client rejoins it; with `--http HOST:PORT` it serves the
streamable-HTTP endpoint `/mcp/`, one session per MCP session.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from typing import Any

import anyio
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandParser

from memoryadmin.agents import mcp
from memoryadmin.agents.bindings import bindings_parse
from memoryadmin.agents.management.commands.session import binding_arguments, memory_options
from memoryadmin.agents.services import sessions as services
from memoryadmin.agents.topics import topic_session_key
from memoryadmin.core import cli
from memoryadmin.core.environments import DEFAULT_ENVIRONMENT
from memoryadmin.core.inputs import whole_number
from memoryadmin.memory.services.projects import project_get


def default_key(agent_id: str, memory: dict[str, Any]) -> str:
    """The same agent and bindings rejoin the same session unless a key is given."""
    canonical = json.dumps([agent_id, memory], sort_keys=True, separators=(",", ":"))
    return "mcp/" + hashlib.sha256(canonical.encode()).hexdigest()[:32]


def logs_to_stderr() -> None:
    """Standard output carries the protocol: every log line goes to standard error."""
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        for handler in getattr(logger, "handlers", []):
            if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
                handler.setStream(sys.stderr)


class Command(cli.Command):
    help = "Serve a session's memory over MCP: stdio (one session) or --http HOST:PORT (/mcp/)."
    serves = True

    def add_arguments(self, parser: CommandParser) -> None:
        binding_arguments(parser, required=False)
        parser.add_argument(
            "--idempotency-key",
            help="The session's key: a restarted server with the same key rejoins the same "
            "session (default: derived from the agent and the bindings).",
        )
        parser.add_argument(
            "--http",
            metavar="HOST:PORT",
            help="Serve the streamable-HTTP endpoint /mcp/ here instead of stdio.",
        )

    def act(self, options: dict[str, Any]) -> None:
        # The handlers' threads are the ones that wait on providers: the providers' bounds
        # per project and in all count them.
        settings.MEMORYADMIN_REQUEST_THREADS = settings.MEMORYADMIN_MCP_THREADS
        if options["http"]:
            self.serve_http(options["http"])
            return
        if not options["project"] or not options["agent"]:
            raise cli.invalid("--project and --agent are required (or --http HOST:PORT).")
        project = project_get(project_id=options["project"])
        agent = options["agent"]
        agent_id = agent if "@" in agent else f"{agent}@{DEFAULT_ENVIRONMENT}"
        environment = services.agent_ref_parse(agent_id)[1]
        memory = memory_options(options)
        # Before any document is created: a refused key leaves nothing behind.
        try:
            key = topic_session_key(options["idempotency_key"] or default_key(agent_id, memory))
        except ValueError as exc:
            raise cli.invalid(f"--idempotency-key: {exc}") from exc
        if options["create_document"]:
            services.binding_documents_ensure(
                project=project,
                environment=environment,
                specs=bindings_parse(memory),
                actor=cli.cli_actor(),
            )
        door = mcp.door_open(
            project=project,
            agent_id=agent_id,
            memory=memory,
            idempotency_key=key,
            actor=cli.cli_actor(),
        )
        logs_to_stderr()
        anyio.run(mcp.serve_stdio, door)

    def serve_http(self, bind: str) -> None:
        import uvicorn

        host, _, text = bind.rpartition(":")
        port = whole_number(text, minimum=1, maximum=65535)
        if not host or port is None:
            raise cli.invalid("--http takes HOST:PORT, e.g. 127.0.0.1:8001.")
        try:
            app = mcp.http_app()
        except ImproperlyConfigured as exc:
            raise cli.invalid(str(exc)) from exc
        self.stderr.write(f"MCP over streamable HTTP at http://{bind}/mcp/")
        uvicorn.run(app, host=host, port=port, log_level="warning")
