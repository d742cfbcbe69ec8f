"""`manage.py doctor [--fix]`: stored strings that break the string rule, and their repair."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from memoryadmin.core import cli
from memoryadmin.memory.services.doctor import doctor_repair, doctor_scan


class Command(cli.Command):
    help = (
        "Find stored strings with NUL or unpaired surrogates (which an earlier version "
        "accepted); --fix replaces those code points with U+FFFD, audited."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--fix", action="store_true", help="repair what is found")

    def act(self, options: dict[str, Any]) -> None:
        findings = list(doctor_scan())
        for finding in findings:
            self.stdout.write(finding.label)
        if not findings:
            self.stdout.write("Every stored string keeps the rule.")
            return
        if not options["fix"]:
            raise cli.Error(
                f"{len(findings)} row(s) hold NUL or unpaired surrogates; "
                "run `manage.py doctor --fix` to repair them.",
                returncode=cli.EXIT_ERROR,
            )
        actor = cli.cli_actor()
        repaired = sum(doctor_repair(finding=f, actor=actor) for f in findings)
        self.stdout.write(f"Repaired {repaired} row(s).")
