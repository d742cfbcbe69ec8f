"""`manage.py memory list RESOURCE --as-of T` and `memory restore-as-of`: a resource as it was."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandParser

from memoryadmin.memory.models import Document, Project
from memoryadmin.memory.representations import version_dict
from memoryadmin.memory.services.asof import (
    document_list_as_of,
    parse_as_of,
    resource_restore_as_of,
)
from memoryadmin.memory.services.documents import document_get, version_list

SUBCOMMANDS = {
    "history": "A document's versions, newest first, with where each came from and the "
    "sessions that read it.",
    "restore-as-of": "Restore documents (default: the whole resource) to their text at a "
    "moment, each as a new version.",
}

# Who read a version (the sessions whose recalls showed it), registered from the agents
# app's `ready()` with `readers_register`; nobody without it.
Readers = Callable[[Document, str], list[dict[str, Any]]]
_readers: list[Readers] = []


def readers_register(readers: Readers) -> None:
    _readers[:] = [readers]


class HistoryCommands:
    """Mixed into the memory command, which provides out, out_json, resource and friends."""

    actor: str
    out: Any
    out_json: Any
    verbose: Any
    resource: Any
    out_documents: Any

    def _args_history(self, parser: CommandParser) -> None:
        parser.add_argument("resource")
        parser.add_argument("document")

    def do_history(self, project: Project, options: dict[str, Any]) -> None:
        resource = self.resource(project, options["resource"])
        document = document_get(resource=resource, doc_id=options["document"])
        versions, _ = version_list(document=document)
        rows = [
            {
                **version_dict(v, include_text=False),
                "readBy": [r for readers in _readers for r in readers(document, v.revision)],
            }
            for v in versions
        ]
        if options["json"]:
            self.out_json({"versions": rows})
            return
        for row in rows:
            origin = row["origin"]
            traced = " ".join(
                f"{name}={origin[name]}"
                for name in ("recallId", "callId", "proposalId")
                if name in origin
            )
            readers = ", ".join(sorted({r["sessionId"] for r in row["readBy"]})) or "-"
            self.out(
                f"{row['createdAt']}  {row['revision']}  {row['action']:<8} "
                f"{origin.get('actor', '?')} {traced}  read by: {readers}"
            )

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
        if not entries:
            self.out(f"No documents in {resource.resource_id} at {options['as_of']}.")
            return
        states = [
            "deleted since"
            if entry["deleted"]
            else ("unchanged" if entry["currentRevision"] == entry["revision"] else "changed since")
            for entry in entries
        ]
        revisions = [entry["revision"] for entry in entries]
        self.out_documents(entries, {"REVISION": revisions, "STATE": states})

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
