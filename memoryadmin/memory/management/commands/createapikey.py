"""`createapikey`: the older name of `apikey create`, kept for scripts that use it."""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import CommandParser

from memoryadmin.core import cli
from memoryadmin.memory.management.commands.apikey import add_scope


class Command(cli.Command):
    help = "Create an API key (same as `apikey create`); printed once, alone on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        add_scope(parser, required=True)
        parser.add_argument("--read-only", action="store_true")
        parser.add_argument("--name", default="")

    def act(self, options: dict[str, Any]) -> None:
        argv = ["create", "--name", options["name"]]
        argv += ["--all-projects"] if options["all_projects"] else ["--project", options["project"]]
        argv += ["--read-only"] if options["read_only"] else []
        call_command("apikey", *argv, stdout=self.stdout._out, stderr=self.stderr._out)
