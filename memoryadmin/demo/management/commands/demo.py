from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from memoryadmin.core import cli
from memoryadmin.demo.project import demo_setup


class Command(cli.Command):
    help = "Set up the demo project (idempotent) and print how to reach it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--base-url", default="http://127.0.0.1:8000")

    def act(self, options: dict[str, Any]) -> None:
        result = demo_setup(base_url=options["base_url"])
        base = options["base_url"]
        what = ", ".join(result.created) if result.created else "nothing (already set up)"
        self.stdout.write(f"Demo set-up created: {what}")
        self.stdout.write("")
        self.stdout.write(f"  API key:  {result.api_key}")
        self.stdout.write(f"  Try:      curl -s -H 'x-api-key: {result.api_key}' \\")
        url = f"{base}/api/managed-agents/projects/demo/memory?environment=development"
        self.stdout.write(f"              '{url}'")
        self.stdout.write(f"  API docs: {base}/api/docs/")
        self.stdout.write("")
        self.stdout.write(f"  Memory page: {base}/")
        for login in result.logins:
            self.stdout.write(f"    {login.role + ':':9} {login.username} / {login.password}")
        self.stdout.write("")
