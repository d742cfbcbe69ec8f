from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from memoryadmin.core import cli
from memoryadmin.memory.services.projects import project_create


class Command(cli.Command):
    help = "Create a project."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("project_id")
        parser.add_argument("--name", default="")

    def act(self, options: dict[str, Any]) -> None:
        project = project_create(
            project_id=options["project_id"], name=options["name"], actor=cli.cli_actor()
        )
        self.stdout.write(project.id)
