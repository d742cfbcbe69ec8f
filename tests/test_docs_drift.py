"""What the README and docs/ name exists in the code: every setting the code reads from
the environment is in a settings table of docs/operations.md or docs/deploy.md (and every
variable of those tables is read), with its documented default; every `manage.py`
command, subcommand and option the pages show is one the command takes; every route the
pages name (tables, prose and curl lines) is served, for the method they name."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path
from typing import Any

import pytest
from django.core.management import get_commands, load_command_class
from django.urls import Resolver404, resolve

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)

# Settings: where the code reads them, and the tables that document them.
SETTINGS_CODE = [ROOT / "memoryadmin" / "settings.py", ROOT / "gunicorn.conf.py"]
SETTINGS_CODE.append(ROOT / "memoryadmin" / "serving.py")
# The helpers that read one variable by name (its first argument; its second the default).
READERS = {
    "env_bool",
    "env_int",
    "env_float",
    "env_list",
    "env_networks",
    "env_rate",
    "required_secret",
    "_int",  # gunicorn.conf.py
    "_setting",  # memoryadmin/serving.py
}
# (page, the heading of its table, the column of the default)
SETTINGS_TABLES = [("operations.md", "## Settings", 2), ("deploy.md", "## Environment", 1)]


def settings_read() -> dict[str, Any]:
    """Each variable the code reads, with its default where that is a literal."""
    found: dict[str, Any] = {}
    for path in SETTINGS_CODE:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                if ast.unparse(node.value) == "os.environ":
                    found.setdefault(ast.literal_eval(node.slice), None)
                continue
            if not isinstance(node, ast.Call) or not node.args:
                continue
            first = node.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else None
            environ_get = isinstance(func, ast.Attribute) and ast.unparse(func) == "os.environ.get"
            if name in READERS or environ_get:
                default = node.args[1] if len(node.args) > 1 else None
                literal = default.value if isinstance(default, ast.Constant) else None
                found.setdefault(first.value, literal)
    return found


def settings_documented() -> dict[str, list[tuple[str, str]]]:
    """Each variable of the settings tables, with (page, its default cell)."""
    rows: dict[str, list[tuple[str, str]]] = {}
    for page, heading, column in SETTINGS_TABLES:
        text = (ROOT / "docs" / page).read_text().split(f"\n{heading}\n", 1)[1]
        table = re.split(r"^## ", text, maxsplit=1, flags=re.M)[0]
        for line in table.splitlines():
            if not line.startswith("| `"):
                continue
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
            names = re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[0])
            default = cells[column]
            parts = next(
                (
                    default.split(sep)
                    for sep in (" / ", ", ")
                    if len(names) > 1 and len(default.split(sep)) == len(names)
                ),
                [default] * len(names),
            )
            for name, part in zip(names, parts, strict=True):
                rows.setdefault(name, []).append((page, part))
    return rows


def test_every_setting_is_documented_and_every_documented_one_read() -> None:
    read, documented = settings_read(), settings_documented()
    assert len(read) > 50, sorted(read)
    assert sorted(set(read) - set(documented)) == [], "read but not in a settings table"
    assert sorted(set(documented) - set(read)) == [], "in a settings table but never read"


def documents(default: Any, cell: str) -> bool:
    """Whether a table's default cell says the code's literal default."""
    if isinstance(default, bool):
        return cell.split()[0].strip(",") == ("on" if default else "off")
    if isinstance(default, int | float):
        number = re.match(r"`?([\d,.]+)", cell)
        return number is not None and float(number.group(1).replace(",", "")) == default
    return f"`{default}`" in cell


def test_documented_defaults_are_the_code_s() -> None:
    documented = settings_documented()
    wrong = [
        (name, default, page, cell)
        for name, default in settings_read().items()
        if default not in (None, "")
        for page, cell in documented.get(name, [])
        if not documents(default, cell)
    ]
    assert wrong == []


# manage.py commands, their subcommands and options, as the pages show them.

COMMAND_LINE = re.compile(r"manage\.py ([a-z_]+)([^`\n#]*)")


def command_lines() -> list[tuple[str, str, list[str]]]:
    """(page, line, tokens after `manage.py`) of every command line the pages show,
    continuation lines of shell blocks joined."""
    found = []
    for page in PAGES:
        text = page.read_text().replace("\\\n", " ")
        for match in COMMAND_LINE.finditer(text):
            tokens = [match.group(1), *match.group(2).replace("[", " ").replace("]", " ").split()]
            found.append((page.name, match.group(0), tokens))
    return found


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def takes_value(parser: argparse.ArgumentParser, option: str) -> bool | None:
    """None for an option the parser does not know."""
    action = parser._option_string_actions.get(option)
    if action is None:
        return None
    return action.nargs != 0


def test_every_documented_command_subcommand_and_option_exists() -> None:
    commands = get_commands()
    lines = command_lines()
    assert len(lines) > 50
    problems = []
    for page, line, (name, *args) in lines:
        if name not in commands:
            problems.append(f"{page}: {line}: no command {name}")
            continue
        parser = load_command_class(commands[name], name).create_parser("manage.py", name)
        subs = subparsers(parser)
        known: list[argparse.ArgumentParser] = [parser]
        tokens = iter(args)
        for token in tokens:
            if token.startswith("--"):
                option = token.split("=", 1)[0]
                values = [takes_value(p, option) for p in known]
                if all(value is None for value in values):
                    problems.append(f"{page}: {line}: {name} takes no {option}")
                elif any(values) and "=" not in token:
                    next(tokens, None)
            elif subs and len(known) == 1:
                if token.isupper() or token.startswith(("<", "$")):
                    break  # a placeholder (SUBCOMMAND, <command>) or a variable
                if token not in subs:
                    problems.append(f"{page}: {line}: {name} has no subcommand {token}")
                    break
                known.append(subs[token])
    assert not problems, "\n".join(problems)


# Routes: `METHOD /path` in tables and prose, and curl lines of shell blocks.

API = "/api/managed-agents"
# Where a path the pages shorten with `…/` (or `.../`) starts.
SHORTENED = {
    "documents": f"{API}/projects/p/memory/r/documents",
    "records": f"{API}/projects/p/memory/r/records",
    "versions": f"{API}/projects/p/memory/r/documents/d/versions",
    "proposals": f"{API}/projects/p/memory/proposals",
    "incidents": f"{API}/projects/p/memory/incidents",
    "erasures": f"{API}/projects/p/memory/erasures",
    "webhooks": f"{API}/projects/p/webhooks",
}
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
# Paths of other services the pages show (providers' own APIs), and the MCP endpoint
# (its own ASGI process, tests/test_mcp.py).
ELSEWHERE = ("/v1/", "/v1beta1/", "/mcp/", "/hooks", "/oc-memory", "/memory")


def route_path(raw: str) -> str | None:
    path = re.split(r"[?\[]", raw, maxsplit=1)[0]
    path = re.sub(r"<[^>]*>", "x1", path)
    for short in ("…/", ".../"):
        if path.startswith(short):
            first = path[len(short) :].split("/", 1)[0]
            path = SHORTENED[first] + path[len(short) + len(first) :]
    if path.startswith(("/projects", "/sessions", "/erasure-key")):
        path = API + path
    if not path.startswith("/") or path.startswith(ELSEWHERE):
        return None
    return path


def documented_routes() -> list[tuple[str, str, str]]:
    """(where, method, path) of every route the pages name."""
    routes = []
    for page in PAGES:
        text = page.read_text()
        prose = FENCE.sub("", text)
        for line in prose.splitlines():
            pending: list[str] = []
            for span in re.findall(r"`([^`]+)`", line):
                span = re.sub(r"<[^>]*>", "x1", span)
                if span.split(" {", 1)[0] in METHODS:  # `PATCH {text}`: the path follows
                    pending.append(span.split(" {", 1)[0])
                    continue
                match = re.match(rf"({'|'.join(METHODS)}) (\S+)", span)
                if match is None:
                    pending = []
                    continue
                path = route_path(match.group(2))
                if path is not None:
                    for method in [*pending, match.group(1)]:
                        routes.append((f"{page.name}: {span}", method, path))
                pending = []
        for lang, body in FENCE.findall(text):
            if lang != "sh":
                continue
            body = body.replace("\\\n", " ")
            variables = dict(re.findall(r"^(\w+)=(?:\$\{\w+:-)?\"?([^\s\"}]+)", body, re.M))
            for line in body.splitlines():
                if "curl " not in line or line.lstrip().startswith("etag()"):
                    continue
                method = re.search(r"-X (\w+)", line)
                expanded = line
                for _ in range(2):  # a variable may hold another (DOC holds BASE)
                    for name, value in variables.items():
                        expanded = expanded.replace(f"${name}", value)
                # A server's address the block leaves to the reader.
                expanded = re.sub(r"\$\{?BASE\}?", "http://127.0.0.1:8000", expanded)
                url = re.search(r"https?://[^/\s\"']+(/[^\s\"']*)", expanded)
                if url is None:
                    continue
                path = route_path(re.sub(r"\$\{?\w+\}?", "x1", url.group(1)))
                if path is not None:
                    verb = method.group(1) if method else ("POST" if " -d " in line else "GET")
                    routes.append((f"{page.name}: {line.strip()}", verb, path))
    return routes


def test_every_folder_an_example_writes_in_the_checkout_is_ignored() -> None:
    """An export the pages run in the checkout (`--out ./DIR`, read back with `--from
    ./DIR`) goes to a folder .gitignore lists: running them leaves nothing untracked."""
    ignored = {
        line.strip().strip("/")
        for line in (ROOT / ".gitignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    folders = []
    for page in PAGES:
        for _lang, body in FENCE.findall(page.read_text()):
            for folder in re.findall(r"--(?:out|from) \./([^\s/]+)", body):
                folders.append((page.name, folder))
    assert folders, "no example writes in the checkout"
    assert [(page, folder) for page, folder in folders if folder not in ignored] == []


def test_every_documented_route_is_served_for_its_method() -> None:
    routes = documented_routes()
    assert len(routes) > 60
    problems = []
    for where, method, path in routes:
        try:
            match = resolve(path)
        except Resolver404:
            problems.append(f"{where}: no route {path}")
            continue
        view = getattr(match.func, "cls", None) or getattr(match.func, "view_class", None)
        if view is not None and not hasattr(view, method.lower()):
            problems.append(f"{where}: {path} does not answer {method}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ("…/documents/x1/versions", f"{API}/projects/p/memory/r/documents/x1/versions"),
        ("/projects/x1/audit[?resource=]", f"{API}/projects/x1/audit"),
        ("/healthz", "/healthz"),
        ("/v1/event/{id}/", None),
    ],
)
def test_route_paths_read_as_the_pages_write_them(raw: str, path: str | None) -> None:
    assert route_path(raw) == path
