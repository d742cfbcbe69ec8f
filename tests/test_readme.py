"""The documentation: the README's curl walkthrough runs verbatim against a live
server; every shell, console, JSON and Python block of the README and of docs/
parses; every relative link points at a file and heading that exist."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from memoryadmin.demo.project import demo_setup
from memoryadmin.memory.models import AuditEntry, Document

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def walkthrough() -> str:
    text = README.read_text()
    block = text.split("<!-- walkthrough:start -->", 1)[1].split("<!-- walkthrough:end -->", 1)[0]
    match = re.search(r"```sh\n(.*?)```", block, re.S)
    assert match is not None
    return match.group(1)


def blocks(language: str) -> list[Any]:
    return [
        pytest.param(body, id=f"{page.relative_to(ROOT)}:{n}")
        for page in PAGES
        for n, (lang, body) in enumerate(FENCE.findall(page.read_text()), 1)
        if lang == language
    ]


def console_commands(transcript: str) -> str:
    """The commands of a `$ ` transcript, continuation lines included."""
    commands: list[str] = []
    continuing = False
    for line in transcript.splitlines():
        if line.startswith("$ ") or continuing:
            commands.append(line.removeprefix("$ "))
            continuing = line.endswith("\\")
    return "\n".join(commands) + "\n"


def bash_parses(script: str) -> None:
    result = subprocess.run(
        ["bash", "-n"], input=script, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
@pytest.mark.django_db(transaction=True)
def test_readme_walkthrough_runs_verbatim(live_server: Any, settings: Any, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path
    key = demo_setup().api_key
    env = {**os.environ, "BASE": live_server.url, "KEY": key, "ID": "walkthrough"}
    result = subprocess.run(
        ["bash", "-c", "set -u\n" + walkthrough()],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    statuses = re.findall(r"-> HTTP (\d{3})", result.stdout)
    assert statuses == ["201", "200", "200", "412", "200", "204", "412"], result.stdout
    assert re.search(r'ETag: "[0-9a-f]+"', result.stdout)
    document = Document.objects.get(doc_id="walkthrough")
    assert document.deleted
    assert document.text == ""
    actions = list(
        AuditEntry.objects.filter(document_id="walkthrough")
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == [
        "document.create",
        "document.replace",
        "document.freeze",
        "document.delete",
    ]


@pytest.mark.parametrize("script", blocks("sh"))
def test_shell_blocks_parse(script: str) -> None:
    bash_parses(script)


@pytest.mark.parametrize("transcript", blocks("console"))
def test_console_transcripts_parse(transcript: str) -> None:
    commands = console_commands(transcript)
    assert commands.strip()
    bash_parses(commands)


@pytest.mark.parametrize("text", blocks("json"))
def test_json_blocks_parse(text: str) -> None:
    assert isinstance(json.loads(text), dict)


@pytest.mark.parametrize("source", blocks("python"))
def test_python_blocks_parse(source: str) -> None:
    ast.parse(source)


def test_every_block_names_its_language() -> None:
    """Untagged blocks are output or usage text; tagged ones are checked above."""
    tagged = {lang for page in PAGES for lang, _ in FENCE.findall(page.read_text())}
    assert tagged <= {"", "sh", "console", "json", "python"}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    text = FENCE.sub("", page.read_text())
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name} links to missing {target}"
        if anchor and linked.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", FENCE.sub("", linked.read_text()), re.M)
            assert anchor in {slug(h) for h in headings}, f"{page.name}: no heading #{anchor}"
