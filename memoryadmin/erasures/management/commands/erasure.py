"""`manage.py erasure run|list|show|verify|key`: erase a text or documents with a signed
receipt, and check receipts against the server's public key (docs/cli.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import CommandParser

from memoryadmin.core import cli
from memoryadmin.core.cancellation import caller_connection
from memoryadmin.core.environments import DEFAULT_ENVIRONMENT, Environment
from memoryadmin.erasures import services
from memoryadmin.erasures.receipts import ReceiptInvalid, public_key, public_key_parse, verify
from memoryadmin.memory.services.projects import project_get

SUBCOMMANDS = {
    "run": "erase a text (--text, --text-file) or documents (--document RESOURCE/ID)",
    "list": "list past erasures, newest first",
    "show": "print one erasure's signed receipt",
    "verify": "check a receipt file against the server's public key (or --public-key)",
    "key": "print the public key that verifies receipts",
}


class Command(cli.Command):
    help = "Erasures with signed receipts: run, list, show, verify, key."

    def add_arguments(self, parser: CommandParser) -> None:
        subcommands = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
        for name, help_text in SUBCOMMANDS.items():
            sub = subcommands.add_parser(name, help=help_text, description=help_text)
            sub.add_argument("--json", action="store_true", help="print JSON")
            if name in {"run", "list", "show"}:
                sub.add_argument("--project", required=True, help="project id")
                sub.add_argument(
                    "--environment", choices=Environment.values, default=DEFAULT_ENVIRONMENT
                )
            if name == "run":
                what = sub.add_mutually_exclusive_group(required=True)
                what.add_argument("--text", help="the exact text to erase")
                what.add_argument("--text-file", help="a file holding the exact text")
                what.add_argument(
                    "--document",
                    action="append",
                    dest="documents",
                    metavar="RESOURCE/ID",
                    help="a document to erase whole (repeatable)",
                )
                sub.add_argument("--reason", required=True, help="why; kept in the receipt")
                sub.add_argument("--dry-run", action="store_true", help="count, change nothing")
                sub.add_argument("--yes", action="store_true", help="erase without asking")
                sub.add_argument("--receipt", help="write the signed receipt to this file")
            if name == "show":
                sub.add_argument("erasure", metavar="ERASURE")
            if name == "verify":
                sub.add_argument("file", metavar="FILE", help="a receipt (JSON), - for stdin")
                sub.add_argument(
                    "--public-key",
                    help="the key to check against (base64 or PEM, or @file); "
                    "default: this server's",
                )

    def act(self, options: dict[str, Any]) -> None:
        getattr(self, "do_" + options["subcommand"])(options)

    def emit(self, options: dict[str, Any], body: Any, lines: list[str]) -> None:
        if options["json"]:
            self.stdout.write(json.dumps(body, indent=2, ensure_ascii=False))
        else:
            for line in lines:
                self.stdout.write(line)

    def _match(self, options: dict[str, Any]) -> dict[str, Any]:
        if options["documents"]:
            return {"documents": services.named_documents(options["documents"])}
        if options["text_file"]:
            return {"text": cli.read_text_file(options["text_file"])}
        return {"text": cli.checked_text(options["text"], source="--text")}

    def do_run(self, options: dict[str, Any]) -> None:
        project = project_get(project_id=options["project"])
        match = self._match(options)
        common = {
            "project": project,
            "environment": options["environment"],
            "match": match,
            "reason": cli.checked_text(options["reason"], source="--reason"),
            "actor": cli.cli_actor(),
        }
        with cli.caller_signals() as gone, caller_connection(gone):
            preview = services.erasure_run(dry_run=True, **common)
            if options["dry_run"]:
                self.emit(options, preview.as_dict(), self._counts(preview.places))
                return
            if not options["yes"]:
                for line in self._counts(preview.places):
                    self.stderr.write(line)
                question = f"Erase these {preview.copies} copies for good?"
                if not cli.confirm(question, stdin=sys.stdin, stderr=self.stderr):
                    raise cli.Error("Nothing erased.")
            outcome = services.erasure_run(dry_run=False, **common)
        body = outcome.as_dict()
        if options["receipt"]:
            Path(options["receipt"]).write_text(
                json.dumps(body["receipt"], indent=2, ensure_ascii=False) + "\n"
            )
        lines = [
            f"erasure {body['id']}: {body['copies']} copies removed",
            *self._counts(body["places"]),
        ]
        if not body["complete"]:
            failed = body["receipt"]["receipt"]["external"]["failed"]
            lines.append(f"incomplete: {len(failed)} provider records failed (dead letters):")
            lines += [
                f"  {f['resource']}/{f['namespace']} {f['operation']}: {f['error']}" for f in failed
            ]
        self.emit(options, body, lines)
        if not body["complete"]:
            raise cli.Error("The erasure is incomplete: see the dead letters above.")

    def _counts(self, places: dict[str, int]) -> list[str]:
        return [f"{name:<26} {places.get(name, 0)}" for name in services.PLACES]

    def do_list(self, options: dict[str, Any]) -> None:
        project = project_get(project_id=options["project"])
        rows, _ = services.erasure_list(project=project, environment=options["environment"])
        bodies = [services.erasure_dict(row) for row in rows]
        lines = [
            f"{b['id']}\t{b['createdAt']}\t{b['actor']}\t{b['copies']} copies\t"
            f"{'complete' if b['complete'] else 'incomplete'}\t{b['reason']}"
            for b in bodies
        ]
        self.emit(options, {"erasures": bodies}, lines or ["(no erasures)"])

    def do_show(self, options: dict[str, Any]) -> None:
        project = project_get(project_id=options["project"])
        erasure = services.erasure_get(
            project=project, environment=options["environment"], erasure_id=options["erasure"]
        )
        self.stdout.write(json.dumps(erasure.signed, indent=2, ensure_ascii=False))

    def do_key(self, options: dict[str, Any]) -> None:
        key = public_key().as_dict()
        lines = [f"{key['algorithm']} {key['keyId']}", key["publicKey"], key["pem"].rstrip()]
        self.emit(options, key, lines)

    def do_verify(self, options: dict[str, Any]) -> None:
        source = options["file"]
        raw = cli.read_input(source, stdin=sys.stdin)
        try:
            document = json.loads(raw)
        except ValueError as exc:
            name = "Standard input" if source == "-" else source
            raise self._invalid(f"{name} is not JSON: {exc}.") from exc
        given = options["public_key"]
        if given and given.startswith("@"):
            given = cli.read_text_file(given[1:])
        try:
            public = public_key_parse(given) if given else public_key().raw
            receipt = verify(document, public)
        except ReceiptInvalid as exc:
            raise self._invalid(f"Invalid receipt: {exc}") from exc
        self.emit(
            options,
            {"valid": True, "receipt": receipt},
            [
                f"valid: erasure {receipt.get('id')} of {receipt.get('project')} "
                f"({receipt.get('environment')}) at {receipt.get('erasedAt')}, "
                f"{receipt.get('copies')} copies, signed by key {document['signature']['keyId']}"
            ],
        )

    def _invalid(self, message: str) -> cli.Error:
        return cli.Error(message, returncode=cli.EXIT_INVALID_SIGNATURE)
