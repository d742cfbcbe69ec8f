"""Records of resources whose provider keeps them elsewhere (external providers), from the
command line: list, search, show, history, add, edit and remove, through the provider."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import CommandParser

from memoryadmin.agents.services import records as record_services
from memoryadmin.core import cli
from memoryadmin.core.cancellation import caller_connection
from memoryadmin.core.environments import DEFAULT_ENVIRONMENT, Environment
from memoryadmin.memory.models import Resource
from memoryadmin.memory.services.deployments import resource_get
from memoryadmin.memory.services.projects import project_get

SUBCOMMANDS = {
    "list": "list a namespace's records (or search them with --search)",
    "show": "show one record",
    "history": "show a record's changes, where the provider keeps them",
    "add": "add a record through the provider",
    "edit": "replace a record's text at the provider",
    "remove": "delete a record at the provider",
}


class Command(cli.Command):
    help = "Records of external memory providers: list, show, history, add, edit, remove."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project id")
        parser.add_argument(
            "--environment", choices=Environment.values, default=DEFAULT_ENVIRONMENT
        )
        parser.add_argument("--json", action="store_true", help="print JSON")
        subcommands = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
        for name, help_text in SUBCOMMANDS.items():
            sub = subcommands.add_parser(name, help=help_text, description=help_text)
            sub.add_argument("resource")
            if name not in {"list", "add"}:
                sub.add_argument("record")
            sub.add_argument("--namespace", required=True, help="the provider partition")
            if name == "list":
                sub.add_argument("--search", default=None, help="search with the provider")
                sub.add_argument("--cursor", default=None, help="the next page's cursor")
            if name in {"add", "edit"}:
                sub.add_argument("--text", default=None, help="the text (else standard input)")
            if name == "remove":
                sub.add_argument("--yes", action="store_true", help="confirm the deletion")

    def act(self, options: dict[str, Any]) -> None:
        project = project_get(project_id=options["project"])
        resource = resource_get(
            project=project, environment=options["environment"], resource_id=options["resource"]
        )
        self.options = options
        text = self.text() if options["subcommand"] in {"add", "edit"} else ""
        # An interrupt, a kill or a closed terminal cancels the provider call in flight.
        with cli.caller_signals() as gone, caller_connection(gone):
            self.run(options, resource=resource, text=text)

    def run(self, options: dict[str, Any], *, resource: Resource, text: str) -> None:
        common = {"resource": resource, "namespace": options["namespace"]}
        actor = cli.cli_actor()
        command = options["subcommand"]
        if command == "list":
            if options["search"] is not None:
                records = record_services.record_search(**common, query=options["search"])
                self.emit({"records": records, "nextCursor": None})
            else:
                records, cursor = record_services.record_list(**common, cursor=options["cursor"])
                self.emit({"records": records, "nextCursor": cursor})
        elif command == "show":
            self.emit(record_services.record_get(**common, record_id=options["record"]))
        elif command == "history":
            history = record_services.record_history(**common, record_id=options["record"])
            self.emit({"history": history})
        elif command == "add":
            result = record_services.record_create(**common, text=text, actor=actor)
            self.emit(result)
        elif command == "edit":
            result = record_services.record_update(
                **common, record_id=options["record"], text=text, actor=actor
            )
            self.emit(result)
        else:
            if not options["yes"]:
                raise cli.invalid("remove deletes the record at the provider: add --yes.")
            result = record_services.record_delete(
                **common, record_id=options["record"], actor=actor
            )
            self.emit(result)

    def text(self) -> str:
        if self.options["text"] is not None:
            return cli.checked_text(self.options["text"], source="--text")
        return cli.read_stream(sys.stdin)

    def emit(self, data: dict[str, Any]) -> None:
        if self.options["json"]:
            self.stdout.write(json.dumps(data, indent=2, ensure_ascii=False))
            return
        if "status" in data:
            detail = data.get("operation") or data.get("id") or ""
            self.stdout.write(f"{data['status']} {detail}".rstrip())
        for record in data.get("records", []):
            self.stdout.write(f"{record['id']}  {record['text']}")
        if data.get("nextCursor"):
            self.stdout.write(f"more: --cursor {data['nextCursor']}")
        for change in data.get("history", []):
            self.stdout.write(f"{change['at'] or '-'}  {change['action']}  {change['text'] or ''}")
        if "metadata" in data:
            self.stdout.write(f"{data['id']}  {data['text']}")
            self.stdout.write(f"provider id: {data['metadata']['providerExternalId']}")
