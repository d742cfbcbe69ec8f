"""`manage.py memory list RESOURCE --as-of T` and `memory restore-as-of`: a resource as it was."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from memoryadmin.memory.models import Project
from memoryadmin.memory.services.asof import (
    document_list_as_of,
    parse_as_of,
    resource_restore_as_of,
)

SUBCOMMANDS = {
    "restore-as-of": "Restore documents (default: the whole resource) to their text at a "
    "moment, each as a new version.",
}


class HistoryCommands:
    """Mixed into the memory command, which provides out, out_json, resource and friends."""

    actor: str
    out: Any
    out_json: Any
    verbose: Any
    resource: Any

    def _args_restore_as_of(self, parser: CommandParser) -> None:
        parser.add_argument("resource")
        parser.add_argument("--as-of", required=True, help="ISO 8601 time (UTC if no zone)")
        parser.add_argument(
            "--document", action="append", default=None, help="only this document (repeatable)"
        )
        parser.add_argument("--dry-run", action="store_true", help="show the plan only")

    def list_as_of(self, project: Project, options: dict[str, Any]) -> None:
        resource = self.resource(project, options["resource"])
        as_of = parse_as_of(options["as_of"])
        entries: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            page, cursor = document_list_as_of(resource=resource, as_of=as_of, cursor=cursor)
            entries.extend(e.as_dict(max_bytes=resource.max_bytes) for e in page)
            if cursor is None:
                break
        if options["json"]:
            self.out_json({"documents": entries})
            return
        for entry in entries:
            state = (
                "deleted since"
                if entry["deleted"]
                else (
                    "unchanged"
                    if entry["currentRevision"] == entry["revision"]
                    else "changed since"
                )
            )
            self.out(f"{entry['id']}  {entry['revision']}  {state}  {entry['title']}")
        if not entries:
            self.out(f"No documents in {resource.resource_id} at {options['as_of']}.")

    def do_restore_as_of(self, project: Project, options: dict[str, Any]) -> None:
        resource = self.resource(project, options["resource"])
        plan = resource_restore_as_of(
            resource=resource,
            as_of=parse_as_of(options["as_of"]),
            doc_ids=options["document"],
            dry_run=options["dry_run"],
            actor=self.actor,
        )
        if options["json"]:
            self.out_json(plan.as_dict())
            return
        for item in plan.items:
            written = f" -> {item.revision}" if item.revision else ""
            self.out(f"{item.doc_id}  {item.action}{written}")
