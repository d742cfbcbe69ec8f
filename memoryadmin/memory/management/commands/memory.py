"""The owner CLI: `manage.py memory --project P <subcommand> ...`.

A thin door like the API: it reads arguments, calls the services and prints
the result. Its failures and exit codes are those of every command (memoryadmin/core/cli.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from django.core.management.base import CommandParser

from memoryadmin.core import cli
from memoryadmin.core.environments import DEFAULT_ENVIRONMENT, Environment
from memoryadmin.core.errors import DomainError
from memoryadmin.core.inputs import int_argument
from memoryadmin.files import private_create, private_dir
from memoryadmin.memory.cli_history import SUBCOMMANDS as HISTORY_SUBCOMMANDS
from memoryadmin.memory.cli_history import HistoryCommands
from memoryadmin.memory.cli_proposals import SUBCOMMANDS as PROPOSAL_SUBCOMMANDS
from memoryadmin.memory.cli_proposals import ProposalCommands
from memoryadmin.memory.export import (
    CREATED,
    DELETED,
    EXISTS,
    FAILED,
    MANIFEST_NAME,
    MISSING_RESOURCE,
    ExportSnapshot,
    export_file,
    export_import,
    export_read_manifest,
    export_snapshot,
    jsonl_chunks,
)
from memoryadmin.memory.imports import ExportDirectory
from memoryadmin.memory.limits import LIST_PAGE_SIZE
from memoryadmin.memory.models import Document, Project, Resource
from memoryadmin.memory.representations import (
    document_dict,
    document_entries,
    search_hit_dict,
    version_dict,
)
from memoryadmin.memory.services.deployments import (
    inventory_count,
    resource_documents_check,
    resource_get,
    resource_inventory,
)
from memoryadmin.memory.services.documents import (
    document_create,
    document_delete,
    document_get,
    document_list,
    document_replace,
    document_set_agent_writes,
)
from memoryadmin.memory.services.projects import project_get
from memoryadmin.memory.services.redaction import version_redact
from memoryadmin.memory.services.search import document_resources, document_search, plain_snippet
from memoryadmin.memory.services.tombstones import document_get_or_tombstone

SUBCOMMANDS = {
    "list": "List the documents of a resource (or, without one, the resources).",
    "show": "Show one document.",
    "create": "Create a document.",
    "edit": "Replace a document's text (in $VISUAL/$EDITOR unless a text option is given).",
    "freeze": "Disable agent writes to a document.",
    "unfreeze": "Enable agent writes to a document again.",
    "export": "Write every document to <out>/<resource>/<id>.json plus a manifest.",
    "import": "Create the documents of an export directory; never overwrites.",
    "remove": "Delete a document; its id stays reserved.",
    "redact": "Replace an old version's title, summary and text with a marker, for good.",
    "search": "Search the documents of the environment (or of one resource), best first.",
    **PROPOSAL_SUBCOMMANDS,
    **HISTORY_SUBCOMMANDS,
}


class Command(HistoryCommands, ProposalCommands, cli.Command):
    help = (
        "Owner access to document memory: list, show, create, edit, freeze, search, export, "
        "import, remove, redact versions, review proposals, read a document's history and "
        "restore a resource as it was."
    )
    # Tests hand the command a stdin of their own.
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        self._add_common(parser, sub=False)
        subcommands = parser.add_subparsers(
            dest="subcommand", required=True, metavar="SUBCOMMAND", title="subcommands"
        )
        for name, help_text in SUBCOMMANDS.items():
            sub = subcommands.add_parser(name, help=help_text, description=help_text)
            self._add_common(sub, sub=True)
            getattr(self, f"_args_{name.replace('-', '_')}")(sub)

    def _add_common(self, parser: CommandParser, *, sub: bool) -> None:
        # Accepted before or after the subcommand; the subcommand's copy
        # only counts when given.
        def default(value: Any) -> Any:
            return argparse.SUPPRESS if sub else value

        parser.add_argument("--project", default=default(None), help="project id (required)")
        parser.add_argument(
            "--environment", choices=Environment.values, default=default(DEFAULT_ENVIRONMENT)
        )
        parser.add_argument(
            "--json", action="store_true", default=default(False), help="print JSON"
        )

    def _args_list(self, parser: CommandParser) -> None:
        parser.add_argument("resource", nargs="?")
        parser.add_argument("--as-of", default=None, help="the resource as it was then (ISO 8601)")

    def _args_show(self, parser: CommandParser) -> None:
        parser.add_argument("resource")
        parser.add_argument("document")

    def _args_create(self, parser: CommandParser) -> None:
        self._args_show(parser)
        parser.add_argument("--title", required=True)
        self._text_options(parser)
        parser.add_argument("--summary", default="")
        parser.add_argument("--frozen", action="store_true", help="create with agent writes off")

    def _args_edit(self, parser: CommandParser) -> None:
        self._args_show(parser)
        self._text_options(parser)
        parser.add_argument("--summary", default=None, help="replace the summary too")
        parser.add_argument(
            "--revision", default=None, help="save only if the document is still at this revision"
        )

    def _args_freeze(self, parser: CommandParser) -> None:
        self._args_show(parser)

    _args_unfreeze = _args_freeze

    def _args_export(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--out",
            required=True,
            help="dir: a new or empty directory; jsonl: a new file, or - for stdout",
        )
        parser.add_argument(
            "--format",
            choices=["dir", "jsonl"],
            default="dir",
            help="dir: one file per document (importable); jsonl: one JSON Lines stream",
        )
        parser.add_argument(
            "--resource", action="append", default=None, help="export only this resource"
        )

    def _args_import(self, parser: CommandParser) -> None:
        parser.add_argument("--from", dest="source", required=True, help="an export directory")

    def _args_remove(self, parser: CommandParser) -> None:
        self._args_show(parser)
        parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    def _args_redact(self, parser: CommandParser) -> None:
        self._args_show(parser)
        parser.add_argument(
            "revision",
            help="the version's revision (memory show lists none; "
            "see the page's history or the API's versions)",
        )
        parser.add_argument("--reason", required=True, help="kept in the audit log")
        parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    def _args_search(self, parser: CommandParser) -> None:
        parser.add_argument("query", help='words, "a phrase" or pre* (see docs/api.md)')
        parser.add_argument("--resource", default=None, help="only this resource")
        parser.add_argument(
            "--limit", type=int_argument(), default=20, help="at most this many hits (1-50)"
        )

    def _text_options(self, parser: CommandParser) -> None:
        text = parser.add_mutually_exclusive_group()
        text.add_argument("--text-file", default=None, help="read the text from this file")
        text.add_argument("--text-stdin", action="store_true", help="read the text from stdin")

    # The doors' shared plumbing.

    def act(self, options: dict[str, Any]) -> None:
        if not options["project"]:
            raise cli.Error("--project is required.", returncode=cli.EXIT_USAGE)
        self.options = options
        self.actor = cli.cli_actor()
        self.stdin: TextIO = options.get("stdin") or sys.stdin
        project = project_get(project_id=options["project"])
        getattr(self, "do_" + options["subcommand"].replace("-", "_"))(project, options)

    def resource(self, project: Project, resource_id: str) -> Resource:
        resource = resource_get(
            project=project, environment=self.options["environment"], resource_id=resource_id
        )
        return resource_documents_check(resource)

    def out(self, text: str = "") -> None:
        self.stdout.write(text)

    def out_json(self, data: Any) -> None:
        self.stdout.write(json.dumps(data, ensure_ascii=False, indent=2))

    def confirm_or_stop(self, question: str, *, doing: str, done: str) -> None:
        """Asks on a terminal; without one, a destructive command needs --yes."""
        if not self.stdin.isatty():
            raise cli.invalid(f"Not {doing} without confirmation: pass --yes.")
        if not cli.confirm(question, stdin=self.stdin, stderr=self.stderr):
            raise cli.Error(f"Cancelled; nothing {done}.")

    def verbose(self) -> bool:
        return int(self.options["verbosity"]) > 0

    def given_text(self, options: dict[str, Any]) -> str | None:
        if options["text_file"] is not None:
            return cli.read_text_file(options["text_file"])
        if options["text_stdin"]:
            return cli.read_stream(self.stdin)
        return None

    def report(self, document: Document, resource: Resource, what: str) -> None:
        if self.options["json"]:
            self.out_json(
                document_dict(
                    document, max_bytes=resource.max_bytes, review_default=resource.review_default
                )
            )
        elif self.verbose():
            self.out(
                f"{what} {resource.resource_id}/{document.doc_id} "
                f"(revision {document.revision}, {document.bytes} bytes)."
            )

    # Subcommands.

    def do_list(self, project: Project, options: dict[str, Any]) -> None:
        if options["resource"] is None:
            self.list_resources(project)
            return
        if options["as_of"] is not None:
            self.list_as_of(project, options)
            return
        resource = self.resource(project, options["resource"])
        entries: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            rows, cursor = document_list(resource=resource, cursor=cursor)
            entries.extend(document_entries(rows, resource))
            if cursor is None:
                break
        if options["json"]:
            self.out_json({"documents": entries})
            return
        if not entries:
            self.out(f"No documents in {resource.resource_id}.")
            return
        self.out_documents(entries)

    def out_documents(
        self, entries: list[dict[str, Any]], extra: dict[str, list[str]] | None = None
    ) -> None:
        """Documents as `list` prints them (with `--as-of` too): a heading, then one
        aligned row each; `extra` adds columns (heading: one cell per entry) at the end."""
        extra = extra or {}
        rows = [["ID", "TITLE", "BYTES", "AGENT WRITES", "UPDATED", "WRITER", *extra]]
        rows += [
            [
                e["id"],
                _clip(e["title"], 40),
                f"{e['bytes']}/{e['maxBytes']}",
                e["agentWrites"],
                e["updatedAt"],
                _writer(e["writer"]),
                *(cells[i] for cells in extra.values()),
            ]
            for i, e in enumerate(entries)
        ]
        self.out(_table(rows))

    def list_resources(self, project: Project) -> None:
        inventory = resource_inventory(project=project, environment=self.options["environment"])
        if self.options["json"]:
            self.out_json({"resources": inventory})
            return
        if not inventory:
            self.out(f"No memory resources in {self.options['environment']}.")
            return
        rows = [["RESOURCE", "KIND", "MAX BYTES", "STATE", "DOCUMENTS"]]
        rows += [
            [
                r["id"],
                r["provider"]["kind"],
                str(r["provider"]["maxBytes"]),
                "declared" if r["declared"] else "retired",
                _documents_shown(inventory_count(r)),
            ]
            for r in inventory
        ]
        self.out(_table(rows))

    def do_show(self, project: Project, options: dict[str, Any]) -> None:
        resource = self.resource(project, options["resource"])
        # A deleted document: who deleted it and when, as on the Memory page.
        document = document_get_or_tombstone(resource=resource, doc_id=options["document"])
        data = document_dict(
            document, max_bytes=resource.max_bytes, review_default=resource.review_default
        )
        if options["json"]:
            self.out_json(data)
            return
        self.out(f"{resource.resource_id}/{data['id']}: {cli.one_line(data['title'])}")
        self.out(f"  summary:      {cli.one_line(data['summary'])}")
        self.out(f"  agent writes: {data['agentWrites']}")
        self.out(f"  revision:     {data['revision']}")
        self.out(f"  size:         {data['bytes']} of {data['maxBytes']} bytes")
        self.out(f"  updated:      {data['updatedAt']} by {_writer(data['writer'])}")
        self.out("")
        self.stdout.write(data["text"], ending="\n" if data["text"] else "")

    def do_create(self, project: Project, options: dict[str, Any]) -> None:
        resource = self.resource(project, options["resource"])
        document = document_create(
            resource=resource,
            doc_id=options["document"],
            title=options["title"],
            text=self.given_text(options) or "",
            summary=options["summary"],
            agent_writes=not options["frozen"],
            actor=self.actor,
        )
        self.report(document, resource, "Created")

    def do_edit(self, project: Project, options: dict[str, Any]) -> None:
        resource = self.resource(project, options["resource"])
        document = document_get(resource=resource, doc_id=options["document"])
        expected = options["revision"] or document.revision
        text = self.given_text(options)
        draft: Path | None = None
        if text is None:
            label = f"{resource.resource_id}-{document.doc_id}"
            draft, text = cli.open_in_editor(document.text, label=label)
        summary = options["summary"]
        if text == document.text and summary in (None, document.summary):
            if draft is not None:
                draft.unlink(missing_ok=True)
            if self.verbose():
                self.out("No changes; nothing saved.")
            return
        try:
            saved = document_replace(
                resource=resource,
                doc_id=document.doc_id,
                expected_revision=expected,
                text=text,
                summary=summary,
                actor=self.actor,
            )
        except DomainError as exc:
            if draft is None:
                raise
            # No lost work: the edited text stays in the draft file.
            raise cli.error_from(exc, suffix=f"Nothing saved; your text is in {draft}") from exc
        if draft is not None:
            draft.unlink(missing_ok=True)
        self.report(saved, resource, "Saved")

    def do_freeze(self, project: Project, options: dict[str, Any]) -> None:
        self.set_agent_writes(project, options, enabled=False)

    def do_unfreeze(self, project: Project, options: dict[str, Any]) -> None:
        self.set_agent_writes(project, options, enabled=True)

    def set_agent_writes(self, project: Project, options: dict[str, Any], *, enabled: bool) -> None:
        resource = self.resource(project, options["resource"])
        document, changed = document_set_agent_writes(
            resource=resource, doc_id=options["document"], enabled=enabled, actor=self.actor
        )
        name = f"{resource.resource_id}/{document.doc_id}"
        if options["json"]:
            self.out_json(
                document_dict(
                    document, max_bytes=resource.max_bytes, review_default=resource.review_default
                )
            )
        elif not self.verbose():
            pass
        elif not changed:
            state = "enabled" if enabled else "disabled"
            self.out(f"Agent writes to {name} were already {state}; nothing changed.")
        elif enabled:
            self.out(f"Unfrozen {name}: agent writes are enabled (revision {document.revision}).")
        else:
            self.out(
                f"Frozen {name}: no later agent save can commit; reads and owner edits "
                f"continue (revision {document.revision})."
            )

    def do_remove(self, project: Project, options: dict[str, Any]) -> None:
        resource = self.resource(project, options["resource"])
        document = document_get(resource=resource, doc_id=options["document"])
        name = f"{resource.resource_id}/{document.doc_id}"
        if not options["yes"]:
            self.confirm_or_stop(
                f"Delete {name} ({cli.one_line(document.title)})? Its title, text and summary "
                "are wiped and the id stays reserved.",
                doing=f"deleting {name}",
                done="deleted",
            )
        # The revision shown at the prompt: a change since then is not deleted unseen.
        document_delete(
            resource=resource,
            doc_id=document.doc_id,
            expected_revision=document.revision,
            actor=self.actor,
        )
        if options["json"]:
            self.out_json({"deleted": {"resource": resource.resource_id, "id": document.doc_id}})
        elif self.verbose():
            self.out(
                f"Deleted {name}. The id '{document.doc_id}' stays reserved and cannot be "
                "created again; use a new id for new notes."
            )

    def do_redact(self, project: Project, options: dict[str, Any]) -> None:
        resource = self.resource(project, options["resource"])
        revision = options["revision"]
        name = f"{resource.resource_id}/{options['document']}"
        if not options["yes"]:
            self.confirm_or_stop(
                f"Redact version {revision} of {name} for good? Its title, summary and text "
                "cannot be read or restored afterwards.",
                doing=f"redacting {name}",
                done="redacted",
            )
        version = version_redact(
            resource=resource,
            doc_id=options["document"],
            revision=revision,
            reason=options["reason"],
            actor=self.actor,
        )
        if options["json"]:
            self.out_json(version_dict(version, include_text=True))
        elif self.verbose():
            self.out(f"Redacted version {revision} of {name}.")

    def do_search(self, project: Project, options: dict[str, Any]) -> None:
        if options["resource"] is not None:
            resources = [self.resource(project, options["resource"])]
        else:
            resources = document_resources(project=project, environment=options["environment"])
        if not 1 <= options["limit"] <= LIST_PAGE_SIZE:
            raise cli.invalid(f"--limit is 1-{LIST_PAGE_SIZE}.")
        hits, _ = document_search(
            resources=resources,
            q=options["query"],
            limit=options["limit"],
            scope=f"{project.id}:{options['environment']}",
        )
        by_id = {r.resource_id: r for r in resources}
        entries = [
            search_hit_dict(hit, resource=by_id[hit["resource"]], with_resource=True)
            for hit in hits
        ]
        if options["json"]:
            self.out_json({"documents": entries})
        elif not entries:
            self.out(f"No documents match {options['query']!r}.")
        else:
            rows = [["RESOURCE", "ID", "TITLE", "SNIPPET"]]
            rows += [
                [
                    e["resource"],
                    e["id"],
                    _clip(e["title"], 30),
                    _clip(plain_snippet(e["snippet"]), 60),
                ]
                for e in entries
            ]
            self.out(_table(rows))

    def do_export(self, project: Project, options: dict[str, Any]) -> None:
        if options["format"] == "jsonl":
            self.export_jsonl(project, options)
            return
        out = Path(options["out"])
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise cli.invalid(f"{out} exists and is not an empty directory.")
        with self.exporting(project, options, out) as snapshot:
            progress = self.progress(total=snapshot.count, label="Exporting")
            written = write_export(snapshot, out, progress)
            manifest = {**snapshot.manifest(), "documents": written}
            # Written last: a directory with a manifest is a complete export.
            manifest_fd = private_create(out / MANIFEST_NAME)
            with os.fdopen(manifest_fd, "wb") as manifest_file:
                manifest_file.write(export_file(manifest))
        if options["json"]:
            self.out_json(manifest)
        elif self.verbose():
            how = (
                "one consistent snapshot" if manifest["consistentSnapshot"] else "individual reads"
            )
            self.out(
                f"Exported {_count(written, 'document')} from "
                f"{_count(len(manifest['resources']), 'resource')} "
                f"to {out} ({how})."
            )

    @contextmanager
    def exporting(
        self, project: Project, options: dict[str, Any], out: Path
    ) -> Iterator[ExportSnapshot]:
        """The snapshot an export reads, its writes to `out` refused in one line."""
        with (
            _export_writes(out),
            export_snapshot(
                project=project,
                environment=options["environment"],
                resource_ids=options["resource"],
                actor=self.actor,
            ) as snapshot,
        ):
            yield snapshot

    def export_jsonl(self, project: Project, options: dict[str, Any]) -> None:
        to_stdout = options["out"] == "-"
        out = Path(options["out"])
        if not to_stdout and out.exists():
            raise cli.invalid(f"{out} exists; a JSON Lines export goes to a new file.")
        with self.exporting(project, options, out) as snapshot:
            target = sys.stdout.buffer if to_stdout else os.fdopen(private_create(out), "wb")
            complete = False
            try:
                for chunk in jsonl_chunks(snapshot):
                    target.write(chunk)
                target.flush()
                complete = True
            finally:
                if not to_stdout:
                    target.close()
                    if not complete:
                        out.unlink(missing_ok=True)  # made above, never whole
            manifest = snapshot.manifest()
        if options["json"] and not to_stdout:
            self.out_json(manifest)
        elif self.verbose() and not to_stdout:
            self.out(
                f"Exported {_count(manifest['documents'], 'document')} from "
                f"{_count(len(manifest['resources']), 'resource')} to {out} (JSON Lines)."
            )

    def do_import(self, project: Project, options: dict[str, Any]) -> None:
        source = ExportDirectory(Path(options["source"]))
        manifest = export_read_manifest(source.manifest_bytes(), options["source"])
        progress = self.progress(total=manifest["documents"], label="Importing")
        counts: Counter[str] = Counter()
        notes: list[dict[str, Any]] = []
        for outcome in export_import(
            project=project,
            environment=options["environment"],
            source=source,
            manifest=manifest,
            actor=self.actor,
        ):
            progress.advance(outcome.files)
            counts[outcome.status] += outcome.files
            if outcome.status != CREATED:
                notes.append(
                    {
                        "status": outcome.status,
                        "resource": outcome.resource_id,
                        "id": outcome.document_id,
                        "message": outcome.message,
                        "documents": outcome.files,
                    }
                )
        progress.close()
        self.import_report(project, counts, notes)
        if counts[FAILED]:
            raise cli.Error(f"{_count(counts[FAILED], 'document')} could not be imported.")

    def import_report(
        self, project: Project, counts: Counter[str], notes: list[dict[str, Any]]
    ) -> None:
        if self.options["json"]:
            self.out_json({"created": counts[CREATED], "notCreated": notes})
            return
        for note in notes:
            verb = "failed" if note["status"] == FAILED else "skipped"
            # Names and messages come from the export's file names: a terminal acts on
            # none of their characters.
            if note["status"] == MISSING_RESOURCE:
                self.out(
                    cli.one_line(
                        f"skipped resource {note['resource']} "
                        f"({_count(note['documents'], 'document')}): "
                        f"{note['message']}"
                    )
                )
            else:
                self.out(cli.one_line(f"{verb} {note['resource']}/{note['id']}: {note['message']}"))
        skipped = counts[EXISTS] + counts[DELETED] + counts[MISSING_RESOURCE]
        self.out(
            f"Imported {_count(counts[CREATED], 'document')} into {project.id}/"
            f"{self.options['environment']}; skipped {skipped} ({counts[EXISTS]} existing, "
            f"{counts[DELETED]} deleted ids, {counts[MISSING_RESOURCE]} in missing resources); "
            f"{counts[FAILED]} failed."
        )

    def progress(self, *, total: int, label: str) -> cli.Progress:
        enabled = self.stderr.isatty() and self.verbose()
        return cli.Progress(self.stderr, total=total, label=label, enabled=enabled)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _documents_shown(documents: int | None) -> str:
    """A resource's document count; "-" where its records live with the provider."""
    return "-" if documents is None else str(documents)


def _writer(writer: dict[str, Any]) -> str:
    if writer["kind"] == "agent":
        return f"agent (session {writer['sessionId']})"
    return "owner"


def _clip(text: str, width: int) -> str:
    """One line of at most `width` characters (`cli.one_line`)."""
    text = cli.one_line(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


@contextmanager
def _export_writes(out: Path) -> Iterator[None]:
    """A file system that refuses the export's writes (no such folder, no permission, a
    full disk, a closed pipe) ends the command with one line, not a traceback. A folder
    left without its manifest is no export (`import` says so)."""
    where = "standard output" if str(out) == "-" else str(out)
    try:
        yield
    except OSError as exc:
        raise cli.Error(
            f"Cannot write the export to {where}: {exc.strerror or exc}; it is not complete.",
            returncode=cli.EXIT_ERROR,
        ) from exc


def write_export(snapshot: ExportSnapshot, out: Path, progress: cli.Progress) -> int:
    # Every note of the environment: readable by this user only, as var/ and its secrets
    # are (folders it makes 0700, files 0600; an empty folder given keeps its mode).
    private_dir(out)
    for resource_id in snapshot.resources:
        (out / resource_id).mkdir(mode=0o700)
    written = 0
    for resource_id, document in snapshot.documents():
        path = out / resource_id / f"{document['id']}.json"
        try:
            # Exclusive create: ids differing only in case would collide on a
            # case-insensitive filesystem; refuse rather than overwrite.
            fd = private_create(path)
        except FileExistsError as exc:
            raise cli.Error(
                f"{path} already exists: document ids that differ only in case cannot be "
                "exported to this case-insensitive filesystem."
            ) from exc
        try:
            data = memoryview(export_file(document))
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)
        written += 1
        progress.advance()
    progress.close()
    return written
