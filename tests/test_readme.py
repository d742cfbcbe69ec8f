"""The documentation: the README's curl walkthrough runs verbatim against a live
server and its other shell blocks on a checkout set up as `make run` sets one up; the
first-run steps of docs/deploy.md run verbatim on a fresh database with the production
environment, and the worked example of docs/cli.md on a checkout of its own; every
shell, console, JSON and Python block of the README and of docs/ parses; every relative
link points at a file and heading that exist."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from memoryadmin.demo.project import demo_setup
from memoryadmin.memory.models import AuditEntry, Document
from memoryadmin.web.models import ProjectRole
from tests.helpers import DEPLOY_DOC, clean_env, gunicorn, production_env

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


# The README's other shell blocks, verbatim, on a checkout where `make run` has run.


def readme_blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(README.read_text()) if lang == language]


def readme_block(containing: str) -> str:
    """The README's one shell block that contains `containing`."""
    found = [body for body in readme_blocks("sh") if containing in body]
    assert len(found) == 1, f"{len(found)} shell blocks of the README contain {containing!r}"
    return found[0]


def marked(text: str, marker: str) -> str:
    """The fenced block between `<!-- marker:start -->` and `<!-- marker:end -->`."""
    part = text.split(f"<!-- {marker}:start -->", 1)[1].split(f"<!-- {marker}:end -->", 1)[0]
    match = FENCE.search(part.strip() + "\n")
    assert match is not None, marker
    return match.group(2)


# The README's shell blocks that the demo checkout below does not run, and where they run.
RUN_ELSEWHERE = {
    "make run\n": "serves until stopped: demo_checkout runs its set-up step",
    "make test\n": "the suite itself",
    ".venv/bin/python examples/agent_host.py\n": (
        "needs the server of make run: tests/test_client_live.py runs it against a live one"
    ),
}
# The first command of each block the demo checkout runs.
RUN_HERE = ["manage.py grant bob demo", "manage.py memory --project demo list"]


def test_every_readme_shell_block_is_run() -> None:
    rest = [body for body in readme_blocks("sh") if body not in RUN_ELSEWHERE]
    rest.remove(walkthrough())  # test_readme_walkthrough_runs_verbatim
    assert sorted(rest) == sorted(readme_block(first) for first in RUN_HERE)


def make_run_setup() -> tuple[dict[str, str], list[str]]:
    """What the Makefile's `run` target exports, and its set-up commands: those before
    it starts the worker and the server, as a shell in the checkout would run them."""
    makefile = (ROOT / "Makefile").read_text()
    exports = dict(re.findall(r"^run: export (\w+) \?= (.*)$", makefile, re.M))
    recipe = makefile.split("\nrun: $(VENV)/.installed\n", 1)[1].split("\n\n", 1)[0]
    commands = []
    for line in recipe.splitlines():
        if line.startswith("\t$(VPY) manage.py ") and not line.endswith("\\"):
            command = line.strip().replace("$(VPY)", ".venv/bin/python")
            commands.append(command.replace("$(HOST)", "127.0.0.1").replace("$(PORT)", "8000"))
    runs = [command.split()[2] for command in commands]
    assert runs == ["migrate", "demo", "runserver"], recipe
    return exports, commands[:2]


class Checkout:
    """A checkout after `make run`'s set-up step, in a folder of its own: this one's
    .venv and manage.py (linked), its own var/ (MEMORYADMIN_VAR_DIR) and its own SQLite
    database in it. `env` is a shell's environment there: nothing of memoryadmin's set."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.var = home / "var"
        self.env = clean_env(MEMORYADMIN_VAR_DIR=str(self.var))
        self.setup_output = ""

    def sh(self, script: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=self.home,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(self.var / "memoryadmin.sqlite3")) as db:
            return db.execute(sql).fetchall()


@pytest.fixture(scope="module")
def demo_checkout(tmp_path_factory: pytest.TempPathFactory) -> Checkout:
    checkout = Checkout(tmp_path_factory.mktemp("checkout"))
    for name in (".venv", "manage.py"):
        (checkout.home / name).symlink_to(ROOT / name)
    exports, commands = make_run_setup()
    for command in commands:
        done = checkout.sh(command, **exports)
        assert done.returncode == 0, done.stderr
        checkout.setup_output += done.stdout
    assert (checkout.var / "secret-key").is_file()
    return checkout


def printed(block: str) -> re.Pattern[str]:
    """A README block of printed lines as a pattern: `…` stands for a generated value."""
    lines = [re.escape(line).replace("…", r"\S+") for line in block.strip("\n").splitlines()]
    return re.compile(r"\n".join(lines))


def test_make_run_prints_a_login_of_each_role(demo_checkout: Checkout) -> None:
    shown = marked(README.read_text(), "demo-logins")
    assert printed(shown).search(demo_checkout.setup_output), demo_checkout.setup_output
    saved = json.loads((demo_checkout.var / "demo-logins.json").read_text())
    logins = re.findall(r"^ {4}(\w+): +(\S+) / (\S+)$", demo_checkout.setup_output, re.M)
    assert logins == [
        ("owner", "demo-owner", saved["demo-owner"]),
        ("support", "demo-support", saved["demo-support"]),
        ("viewer", "demo-viewer", saved["demo-viewer"]),
    ]
    roles = demo_checkout.rows(
        f"SELECT u.username, r.role FROM {ProjectRole._meta.db_table} r "
        f"JOIN {get_user_model()._meta.db_table} u ON u.id = r.user_id ORDER BY u.username"
    )
    assert roles == [
        ("demo-owner", "owner"),
        ("demo-support", "support"),
        ("demo-viewer", "viewer"),
    ]


def test_readme_grant_block_runs_verbatim(demo_checkout: Checkout) -> None:
    done = demo_checkout.sh(readme_block("manage.py grant bob demo"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "bob is viewer of demo"
    assert re.fullmatch(r"Password for bob \(shown once\): \S{12,}", lines[1])
    assert lines[2:] == ["bob is support of demo", "bob lost their role"]
    grants = demo_checkout.rows(
        f"SELECT action, actor, detail FROM {AuditEntry._meta.db_table} "
        "WHERE action LIKE 'role.%' AND actor LIKE 'cli:%' ORDER BY id"
    )
    assert [(action, json.loads(detail)) for action, _, detail in grants] == [
        ("role.grant", {"user": "bob", "role": "viewer"}),
        ("role.grant", {"user": "bob", "role": "support"}),
        ("role.revoke", {"user": "bob"}),
    ]
    bob = demo_checkout.rows(
        f"SELECT r.role FROM {ProjectRole._meta.db_table} r JOIN "
        f"{get_user_model()._meta.db_table} u ON u.id = r.user_id WHERE u.username = 'bob'"
    )
    assert bob == []


def test_readme_shell_block_runs_verbatim(demo_checkout: Checkout) -> None:
    # The editor the block opens: a script that changes the text.
    done = demo_checkout.sh(
        readme_block("manage.py memory --project demo list"), VISUAL="sed -i s/22/24/"
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"^notes +document +8192 +declared +2$", done.stdout, re.M), done.stdout
    assert "notes/workshop: Workshop notes" in done.stdout
    assert "\nExercises must run on Node.js 22.\n" in done.stdout  # shown before the edit
    assert "Saved notes/workshop" in done.stdout
    assert "Exported 4 documents from 2 resources to memory-export" in done.stdout
    text = demo_checkout.rows(
        f"SELECT text FROM {Document._meta.db_table} WHERE doc_id = 'workshop'"
    )
    assert text == [
        ("Exercises must run on Node.js 24.\nNo paid external services for the demo.\n",)
    ]
    actors = demo_checkout.rows(
        f"SELECT actor FROM {AuditEntry._meta.db_table} "
        "WHERE document_id = 'workshop' AND action = 'document.replace'"
    )
    assert [actor.startswith("cli:") for (actor,) in actors] == [True]
    exported = [
        path for path in (demo_checkout.home / "memory-export").rglob("*") if path.is_file()
    ]
    assert any("Node.js 24." in path.read_text() for path in exported), exported


# The first run of docs/deploy.md, verbatim, on a fresh database.


@pytest.fixture
def fresh_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty database: a SQLite file, or a PostgreSQL database of its own
    on the suite's server, dropped afterwards."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/fresh.sqlite3"
        return
    db = connection.settings_dict
    password = f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else ""
    server = f"postgres://{quote(db['USER'] or '')}{password}@{db['HOST'] or '127.0.0.1'}"
    server += f":{db['PORT'] or '5432'}"
    name = f"{db['NAME']}_first_run_{os.getpid()}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{server}/{name}"
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.parametrize(
    "fresh_database",
    ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
    indirect=True,
)
def test_deploy_first_run_steps_run_verbatim(fresh_database: str, tmp_path: Path) -> None:
    env = clean_env(
        **production_env(),
        MEMORYADMIN_VAR_DIR=str(tmp_path / "var"),
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",  # python: this one
    )
    env["DATABASE_URL"] = fresh_database
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", marked(DEPLOY_DOC.read_text(), "first-run")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "acme" in lines
    assert "alice is owner of acme" in lines
    password = next(line.split(": ", 1)[1] for line in lines if "Password for alice" in line)
    key = lines[-1]
    assert key.startswith("mak_"), done.stdout
    assert not (tmp_path / "var" / "secret-key").exists()
    # The production server serves the project to that key; alice's password is hers.
    with gunicorn(env) as base:
        response = httpx.get(
            base + "/api/managed-agents/projects/acme/memory?environment=production",
            headers={"Host": "memory.example.com", "X-Forwarded-Proto": "https", "x-api-key": key},
        )
    assert response.status_code == 200, response.text
    check = (
        "from django.contrib.auth.models import User; from memoryadmin.web.models import "
        "ProjectRole as R; u = User.objects.get(username='alice'); "
        "print(u.check_password(input()), R.objects.get(user=u, project_id='acme').role)"
    )
    shell = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", check],
        cwd=ROOT,
        env=env,
        input=password + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.splitlines()[-1] == "True owner"


# The worked example of docs/cli.md, verbatim, on a checkout of its own.

CLI_DOC = ROOT / "docs" / "cli.md"


def transcript_steps(transcript: str) -> list[tuple[str, list[str]]]:
    """(command, its printed lines) of each `$ ` step, continuation lines joined."""
    steps: list[tuple[str, list[str]]] = []
    continuing = False
    for line in transcript.splitlines():
        if line.startswith("$ ") or continuing:
            if not continuing:
                steps.append(("", []))
            command, printed = steps[-1]
            steps[-1] = (command + line.removeprefix("$ ") + "\n", printed)
            continuing = line.endswith("\\")
        elif line:
            steps[-1][1].append(line)
    return steps


def shape(line: str) -> str:
    """A printed line less what differs from run to run: revisions and times."""
    line = re.sub(r"\b[0-9a-f]{20}\b", "<revision>", line)
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", "<time>", line)


@pytest.mark.skipif(shutil.which("script") is None, reason="script (util-linux) is not installed")
def test_cli_worked_example_runs_verbatim(
    tmp_path: Path, migrated_sqlite: Callable[[Path], Path]
) -> None:
    """Each command of the example prints what the page shows (revisions and times
    aside); `remove` runs on a terminal, where it asks, and is answered `y`. The checkout's
    database is migrated already (`make run`'s migration of a new one is
    test_make_run_prints_a_login_of_each_role's): its set-up step finds nothing to do."""
    block = next(body for lang, body in FENCE.findall(CLI_DOC.read_text()) if lang == "console")
    checkout = Checkout(tmp_path)
    for name in (".venv", "manage.py"):
        (checkout.home / name).symlink_to(ROOT / name)
    checkout.var.mkdir(mode=0o700)
    migrated_sqlite(checkout.var / "memoryadmin.sqlite3")
    exports, commands = make_run_setup()
    for command in commands:
        assert checkout.sh(command, **exports).returncode == 0
    # "add a line": 17 bytes, as the page's 50 bytes became 67.
    editor = tmp_path / "editor"
    editor.write_text("#!/bin/sh\nprintf 'Meet at 9:30 am.\\n' >> \"$1\"\n")
    editor.chmod(0o700)
    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "VISUAL": str(editor)}
    steps = transcript_steps(block)
    subcommands = [re.search(r"--project demo (\S+)", command) for command, _ in steps]
    assert [found.group(1) for found in subcommands if found] == [
        "list",
        "create",
        "show",
        "edit",
        "freeze",
        "export",
        "import",
        "remove",
    ]
    for command, printed in steps:
        if " remove " in command:
            answer = printed[0].rsplit(" ", 1)[1] + "\n"
            command = f"script -qec {shlex.quote(command.strip())} /dev/null"
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=checkout.home,
                env={**checkout.env, **env},
                input=answer,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            # The terminal echoes the answer where it was typed: ahead of the prompt.
            lines = done.stdout.replace("\r", "").splitlines()
            output = "\n".join(line.rstrip() for line in lines if line != answer.strip())
            output = output.replace("[y/N] ", "[y/N]\n")  # the answer's line end, echoed early
            printed = [printed[0].removesuffix(" " + answer.strip()), *printed[1:]]
        else:
            done = checkout.sh(command, **env)
            output = done.stdout
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        assert [shape(line) for line in output.splitlines() if line] == [
            shape(line) for line in printed
        ], command
