from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser
from django.db import transaction

from memoryadmin.core import cli
from memoryadmin.web.models import Role
from memoryadmin.web.services.roles import UserNotFound, role_grant, role_revoke, user_create


class Command(cli.Command):
    help = "Give a user a role on a project for the Memory page (owner, support or viewer)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("project")
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--role", choices=Role.values)
        group.add_argument(
            "--revoke", action="store_true", help="Remove the user's role on the project."
        )
        parser.add_argument(
            "--create",
            action="store_true",
            help="Create the user if missing, with a generated password printed once.",
        )

    def act(self, options: dict[str, Any]) -> None:
        username, project_id = options["username"], options["project"]
        if options["revoke"]:
            had = role_revoke(username=username, project_id=project_id, actor=cli.cli_actor())
            self.stdout.write(f"{username} {'lost their role' if had else 'had no role'}")
            return
        role, actor = options["role"], cli.cli_actor()
        try:
            with transaction.atomic():
                password = None
                if options["create"]:
                    password = user_create(
                        username=username, project_id=project_id, role=role, actor=actor
                    )
                grant = role_grant(username=username, project_id=project_id, role=role, actor=actor)
        except UserNotFound as exc:
            raise cli.error_from(exc, suffix="Add --create to create it.") from exc
        self.stdout.write(f"{username} is {grant.role} of {project_id}")
        if password is not None:
            self.stdout.write(f"Password for {username} (shown once): {password}")
