"""`manage.py incident trace|show|list|contain`: memory incidents from the shell."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandParser

from memoryadmin.core import cli
from memoryadmin.core.environments import DEFAULT_ENVIRONMENT, Environment
from memoryadmin.core.inputs import int_argument
from memoryadmin.incidents.models import Incident
from memoryadmin.incidents.services import contain as contain_services
from memoryadmin.incidents.services import incidents as services
from memoryadmin.incidents.services.trace import HOPS_DEFAULT, HOPS_MAX
from memoryadmin.memory.services.projects import project_get


def version_option(value: str) -> dict[str, str]:
    """RESOURCE/DOCUMENT@REVISION as a version source."""
    path, at, revision = value.rpartition("@")
    resource, slash, document = path.partition("/")
    if not (at and slash and resource and document and revision):
        raise cli.invalid(f"--version takes RESOURCE/DOCUMENT@REVISION, not {value!r}.")
    return {"resource": resource, "document": document, "revision": revision}


class Command(cli.Command):
    help = "Trace what a bad memory reached, show incidents, and contain them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True)
        parser.add_argument(
            "--environment", choices=Environment.values, default=DEFAULT_ENVIRONMENT
        )
        parser.add_argument("--json", action="store_true")
        commands = parser.add_subparsers(dest="command", required=True)
        trace = commands.add_parser(
            "trace", help="Open an incident: trace what its source reached, hop by hop."
        )
        trace.add_argument("--title", required=True)
        source = trace.add_mutually_exclusive_group(required=True)
        source.add_argument("--session", help="what this session wrote")
        source.add_argument("--version", help="RESOURCE/DOCUMENT@REVISION")
        source.add_argument("--api-key", help="what the key with this prefix wrote")
        source.add_argument("--text", help="every version holding this exact text")
        trace.add_argument(
            "--hops",
            type=int_argument(maximum=HOPS_MAX),
            default=HOPS_DEFAULT,
            help=f"0-{HOPS_MAX} (default {HOPS_DEFAULT})",
        )
        show = commands.add_parser("show", help="An incident: its graph hop by hop.")
        show.add_argument("incident_id")
        commands.add_parser("list", help="The environment's incidents, newest first.")
        contain = commands.add_parser(
            "contain",
            help="Freeze, end sessions, revert tainted writes and revoke the source key.",
        )
        contain.add_argument("incident_id")
        contain.add_argument("--dry-run", action="store_true", help="report only, write nothing")
        contain.add_argument(
            "--action",
            action="append",
            choices=contain_services.ACTIONS,
            help="only these actions (repeatable; default: all that apply)",
        )

    def act(self, options: dict[str, Any]) -> None:
        self.project = project_get(project_id=options["project"])
        self.environment = options["environment"]
        getattr(self, "handle_" + options["command"])(options)

    def emit(self, options: dict[str, Any], data: Any, lines: list[str]) -> None:
        self.stdout.write(json.dumps(data, indent=2) if options["json"] else "\n".join(lines))

    def incident(self, options: dict[str, Any]) -> Incident:
        return services.incident_get(
            project=self.project, environment=self.environment, incident_id=options["incident_id"]
        )

    def handle_trace(self, options: dict[str, Any]) -> None:
        if options["session"] is not None:
            source: dict[str, Any] = {"session": options["session"]}
        elif options["version"] is not None:
            source = {"version": version_option(options["version"])}
        elif options["api_key"] is not None:
            source = {"apiKey": options["api_key"]}
        else:
            source = {"text": options["text"]}
        incident = services.incident_create(
            project=self.project,
            environment=self.environment,
            title=options["title"],
            source=source,
            hops=options["hops"],
            actor=cli.cli_actor(),
        )
        self.show(options, incident)

    def handle_show(self, options: dict[str, Any]) -> None:
        self.show(options, self.incident(options))

    def show(self, options: dict[str, Any], incident: Incident) -> None:
        data = services.incident_dict(incident)
        counts = data["counts"]
        lines = [
            f"{incident.id}  {cli.one_line(incident.title)}",
            f"source {json.dumps(incident.source)}, {incident.hops} hops: "
            f"{counts['version']} versions, {counts['recall']} recalls, "
            f"{counts['session']} sessions, {counts['record']} records",
        ]
        for hop in range(incident.hops + 1):
            nodes = [n for n in data["graph"]["nodes"] if n["hop"] == hop]
            if nodes:
                lines.append(f"hop {hop}:")
                lines += [f"  {node['kind']:<8} {node['id']}" for node in nodes]
        if incident.contained_at is not None:
            lines.append(f"contained {data['containedAt']}")
        self.emit(options, data, lines)

    def handle_list(self, options: dict[str, Any]) -> None:
        rows, _ = services.incident_list(project=self.project, environment=self.environment)
        data = [services.incident_summary(row) for row in rows]
        lines = ["ID                            CREATED                   TITLE"]
        lines += [f"{i['id']:<29} {i['createdAt']:<25} {cli.one_line(i['title'])}" for i in data]
        self.emit(options, {"incidents": data}, lines)

    def handle_contain(self, options: dict[str, Any]) -> None:
        report = contain_services.incident_contain(
            incident=self.incident(options),
            dry_run=options["dry_run"],
            actions=options["action"],
            actor=cli.cli_actor(),
        )
        verb = "would change" if report["dryRun"] else "changed"
        lines = [
            f"{report['incident']}: {', '.join(report['actions'])}; {verb} {report['changed']}"
        ]
        for node in report["nodes"]:
            if node["outcomes"]:
                outcomes = ", ".join(f"{a} {o}" for a, o in node["outcomes"].items())
                lines.append(f"  {node['id']}: {outcomes}")
        for item in report["documents"]:
            if item["action"] == "conflict":
                lines.append(
                    f"  merge needed: {item['resource']}/{item['documentId']} changed since; "
                    "not overwritten (--json shows the merge)"
                )
        lines += [f"  dead letter {operation}" for operation in report["deadLetters"]]
        lines += [f"  queued {operation}" for operation in report["queued"]]
        lines += [f"  pending {operation}" for operation in report["pending"]]
        self.emit(options, report, lines)
