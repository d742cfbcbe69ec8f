"""API keys from the command line: `manage.py apikey list|create|revoke|rotate`.

The only door for all-projects keys. A new key's secret is printed once,
alone on the last line of standard output.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandParser

from memoryadmin.core import cli
from memoryadmin.memory.models import ApiKey
from memoryadmin.memory.representations import api_key_dict
from memoryadmin.memory.services.keys import (
    api_key_create,
    api_key_get,
    api_key_list,
    api_key_revoke,
    api_key_rotate,
    check_grace_seconds,
)

SUBCOMMANDS = {
    "list": "List keys: of one project, all-projects keys, or (without a scope) every key.",
    "create": "Create a key; its secret is printed once, on the last line.",
    "revoke": "Revoke a key (by id or prefix) now.",
    "rotate": "Replace a key by a new one; the old one keeps working for --grace seconds.",
}


def add_scope(parser: CommandParser, *, required: bool) -> None:
    scope = parser.add_mutually_exclusive_group(required=required)
    scope.add_argument("--project", help="the project the key reaches")
    scope.add_argument("--all-projects", action="store_true", help="keys that reach every project")


class Command(cli.Command):
    help = "API keys: list, create, revoke, rotate."

    def add_arguments(self, parser: CommandParser) -> None:
        subcommands = parser.add_subparsers(
            dest="subcommand", required=True, metavar="SUBCOMMAND", title="subcommands"
        )
        for name, help_text in SUBCOMMANDS.items():
            sub = subcommands.add_parser(name, help=help_text, description=help_text)
            sub.add_argument("--json", action="store_true", help="print JSON")
            getattr(self, f"_args_{name}")(sub)

    def _args_list(self, parser: CommandParser) -> None:
        add_scope(parser, required=False)

    def _args_create(self, parser: CommandParser) -> None:
        add_scope(parser, required=True)
        parser.add_argument("--read-only", action="store_true")
        parser.add_argument("--name", default="")

    def _args_revoke(self, parser: CommandParser) -> None:
        parser.add_argument("key", help="the key's id or prefix (see `apikey list`)")

    def _args_rotate(self, parser: CommandParser) -> None:
        parser.add_argument("key", help="the key's id or prefix (see `apikey list`)")
        parser.add_argument(
            "--grace",
            default="0",
            metavar="SECONDS",
            help="how long the old key keeps working (default 0: it stops now)",
        )

    def act(self, options: dict[str, Any]) -> None:
        self.options = options
        getattr(self, f"_{options['subcommand']}")(options)

    def _list(self, options: dict[str, Any]) -> None:
        scoped = options["project"] is not None or options["all_projects"]
        keys = api_key_list(project_id=options["project"], all_projects=not scoped)
        rows = [api_key_dict(key) for key in keys]
        if options["json"]:
            self.stdout.write(json.dumps({"apiKeys": rows}, indent=2))
            return
        for row in rows:
            access = "read-only" if row["readOnly"] else "read-write"
            state = f"revoked {row['revokedAt']}" if row["revokedAt"] else "active"
            used = row["lastUsedAt"] or "never used"
            self.stdout.write(
                f"{row['id']}\t{row['prefix']}…\t{row['scope']}\t{access}\t{state}\t"
                f"created {row['createdAt']}\t{used}\t{row['name']}"
            )

    def _announce(self, key: ApiKey, secret: str, verb: str) -> None:
        if self.options["json"]:
            self.stdout.write(json.dumps({**api_key_dict(key), "secret": secret}, indent=2))
            return
        scope = "all projects" if key.project_id is None else f"project {key.project_id}"
        access = "read-only" if key.read_only else "read-write"
        self.stderr.write(
            f"{verb} a {access} key {key.prefix}… (id {key.pk}) for {scope}. It is shown only once:"
        )
        self.stdout.write(secret)

    def _create(self, options: dict[str, Any]) -> None:
        key, secret = api_key_create(
            project_id=None if options["all_projects"] else options["project"],
            read_only=options["read_only"],
            name=options["name"],
            actor=cli.cli_actor(),
        )
        self._announce(key, secret, "Created")

    def _revoke(self, options: dict[str, Any]) -> None:
        key = api_key_revoke(key=api_key_get(ref=options["key"]), actor=cli.cli_actor())
        if options["json"]:
            self.stdout.write(json.dumps(api_key_dict(key), indent=2))
            return
        self.stdout.write(
            f"Revoked {key.prefix}… (id {key.pk}) at {api_key_dict(key)['revokedAt']}."
        )

    def _rotate(self, options: dict[str, Any]) -> None:
        old = api_key_get(ref=options["key"])
        grace = check_grace_seconds(options["grace"])
        key, secret = api_key_rotate(key=old, actor=cli.cli_actor(), grace_seconds=grace)
        when = "now" if grace == 0 else f"in {grace} seconds"
        if not options["json"]:
            self.stderr.write(f"The old key {old.prefix}… stops working {when}.")
        self._announce(key, secret, "Rotated into")
