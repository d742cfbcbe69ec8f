"""`manage.py secret set|list|delete --project P [--environment E] [--origin O ...] [NAME]`.

`set` reads the value from standard input (one trailing line break is
dropped), so it never appears in shell history or the process list.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandParser

from memoryadmin.core import cli
from memoryadmin.core.environments import DEFAULT_ENVIRONMENT, Environment
from memoryadmin.memory.representations import iso_ms
from memoryadmin.memory.services.projects import project_get
from memoryadmin.providers.services import secrets as secret_services


def _strip_line_break(value: str) -> str:
    if value.endswith("\r\n"):
        return value[:-2]
    return value.removesuffix("\n")


class Command(cli.Command):
    help = "Managed secrets of HTTP memory providers: set (value from stdin), list, delete."
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        subcommands = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
        for name, help_text in {
            "set": "Create or replace a secret; the value is read from standard input.",
            "list": "List the secret names of an environment (never their values).",
            "delete": "Delete a secret.",
        }.items():
            sub = subcommands.add_parser(name, help=help_text, description=help_text)
            sub.add_argument("--project", required=True, help="project id")
            sub.add_argument(
                "--environment", choices=Environment.values, default=DEFAULT_ENVIRONMENT
            )
            if name != "list":
                sub.add_argument("name", metavar="NAME", help="the secret name, e.g. MEMORY_TOKEN")
            if name == "set":
                sub.add_argument(
                    "--origin",
                    action="append",
                    dest="origins",
                    metavar="ORIGIN",
                    help=(
                        "an origin the secret may be sent to, e.g. https://mem.example.com; "
                        "repeatable; required for a new secret (omitted: keep the current ones)"
                    ),
                )

    def act(self, options: dict[str, Any]) -> None:
        project = project_get(project_id=options["project"])
        environment = options["environment"]
        subcommand = options["subcommand"]
        if subcommand == "set":
            stream = options.get("stdin") or sys.stdin
            value = _strip_line_break(cli.read_stream(stream))
            created = secret_services.secret_set(
                project=project,
                environment=environment,
                name=options["name"],
                value=value,
                origins=options.get("origins"),
                actor=cli.cli_actor(),
            )
            verb = "Created" if created else "Replaced"
            self.stdout.write(f"{verb} secret {options['name']} in {project.id}/{environment}.")
        elif subcommand == "list":
            for row in secret_services.secret_list(project=project, environment=environment):
                origins = ",".join(row["origins"]) or "-"
                self.stdout.write(f"{row['name']}\t{origins}\t{iso_ms(row['updated_at'])}")
        else:
            secret_services.secret_delete(
                project=project,
                environment=environment,
                name=options["name"],
                actor=cli.cli_actor(),
            )
            self.stdout.write(f"Deleted secret {options['name']} from {project.id}/{environment}.")
