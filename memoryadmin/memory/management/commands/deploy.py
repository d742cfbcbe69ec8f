from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import CommandParser

from memoryadmin.core import cli
from memoryadmin.core.environments import Environment
from memoryadmin.core.errors import DomainError
from memoryadmin.core.jsonbody import json_parse
from memoryadmin.memory.services.deployments import deployment_create
from memoryadmin.memory.services.projects import project_get


class Command(cli.Command):
    help = "Create a deployment from a manifest file and promote it to an environment."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True)
        parser.add_argument("--environment", required=True, choices=Environment.values)
        parser.add_argument("--manifest", required=True, type=Path)

    def act(self, options: dict[str, Any]) -> None:
        raw = cli.read_file(options["manifest"])
        try:
            manifest = json_parse(raw)
        except DomainError as exc:
            raise cli.invalid(f"Cannot read the manifest: {exc.message}") from exc
        if not isinstance(manifest, dict) or set(manifest) - {"agent", "memory"}:
            raise cli.invalid('The manifest must be {"agent": ..., "memory": [...]}.')
        deployment = deployment_create(
            project=project_get(project_id=options["project"]),
            agent=manifest.get("agent"),  # type: ignore[arg-type]
            memory=manifest.get("memory", []),
            promote=options["environment"],
            actor=cli.cli_actor(),
        )
        self.stdout.write(deployment.id)
