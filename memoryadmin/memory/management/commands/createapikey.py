from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from memoryadmin.memory import cli
from memoryadmin.memory.services.projects import api_key_create


class Command(cli.Command):
    help = "Create an API key; the key is printed once, alone on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        scope = parser.add_mutually_exclusive_group(required=True)
        scope.add_argument("--project", help="the project the key reaches")
        scope.add_argument("--all-projects", action="store_true", help="reach every project")
        parser.add_argument("--read-only", action="store_true")
        parser.add_argument("--name", default="")

    def act(self, options: dict[str, Any]) -> None:
        key, raw = api_key_create(
            project_id=None if options["all_projects"] else options["project"],
            read_only=options["read_only"],
            name=options["name"],
        )
        scope = "all projects" if key.project_id is None else f"project {key.project_id}"
        access = "read-only" if key.read_only else "read-write"
        self.stderr.write(f"Created a {access} key for {scope}. It is shown only once:")
        self.stdout.write(raw)
