from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memoryadmin.memory.errors import DomainError
from memoryadmin.memory.services.projects import project_create


class Command(BaseCommand):
    help = "Create a project."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("project_id")
        parser.add_argument("--name", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            project = project_create(project_id=options["project_id"], name=options["name"])
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(project.id)
