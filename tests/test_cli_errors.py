"""Every command fails the one way: an `Error:` message and the exit code of its kind.

The same failures through real processes are in tests/test_cli.py.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from memoryadmin.agents.errors import (
    IdempotencyConflict,
    InvalidMemoryBinding,
    NotBound,
    SessionClosed,
    SessionNotFound,
)
from memoryadmin.agents.models import Binding, Session
from memoryadmin.core import cli
from memoryadmin.core.errors import (
    Conflict,
    DomainError,
    Forbidden,
    InvalidRequest,
    LimitExceeded,
    NotFound,
    PreconditionFailed,
    PreconditionRequired,
    ProjectNotFound,
    ResourceConflict,
    ToolCollision,
)
from memoryadmin.core.partitions import partition_key
from memoryadmin.memory.models import ApiKey, AuditEntry, Deployment, Project
from memoryadmin.memory.services.deployments import deployment_create
from memoryadmin.providers.errors import SecretNotFound
from memoryadmin.providers.models import Secret
from memoryadmin.refprovider.declaration import reference_declaration
from memoryadmin.web.models import ProjectRole
from memoryadmin.web.services.roles import UserNotFound
from tests.helpers import ROOT, clean_env

pytestmark = pytest.mark.django_db


def run(*args: Any, stdin: str | None = None) -> str:
    out = io.StringIO()
    given: dict[str, Any] = {} if stdin is None else {"stdin": io.StringIO(stdin)}
    call_command(*args, stdout=out, stderr=io.StringIO(), **given)
    return out.getvalue()


def fails(*args: Any, stdin: str | None = None) -> cli.Error:
    """Runs a command that must fail; returns its error, having checked it printed nothing."""
    with pytest.raises(cli.Error) as raised:
        assert run(*args, stdin=stdin) == ""
    return raised.value


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InvalidRequest("x"), cli.EXIT_INVALID),
        (InvalidMemoryBinding("notes", "x"), cli.EXIT_INVALID),
        (NotBound("x"), cli.EXIT_INVALID),
        (ToolCollision("x"), cli.EXIT_INVALID),
        (NotFound("x"), cli.EXIT_NOT_FOUND),
        (ProjectNotFound("x"), cli.EXIT_NOT_FOUND),
        (SessionNotFound("x"), cli.EXIT_NOT_FOUND),
        (SecretNotFound("x"), cli.EXIT_NOT_FOUND),
        (UserNotFound("x"), cli.EXIT_NOT_FOUND),
        (PreconditionFailed("x"), cli.EXIT_PRECONDITION),
        (PreconditionRequired("x"), cli.EXIT_PRECONDITION),
        (LimitExceeded("x", field="text", bytes=2, max_bytes=1), cli.EXIT_TOO_LARGE),
        (Conflict("x"), cli.EXIT_CONFLICT),
        (ResourceConflict("x"), cli.EXIT_CONFLICT),
        (IdempotencyConflict("x", differs=[]), cli.EXIT_CONFLICT),
        (SessionClosed("x"), cli.EXIT_CONFLICT),
        (Forbidden("x"), cli.EXIT_ERROR),
    ],
)
def test_every_domain_error_has_the_exit_code_of_its_kind(error: DomainError, code: int) -> None:
    assert cli.exit_code_for(error) == code
    made = cli.error_from(error)
    assert (str(made), made.returncode) == (error.message, code)


def test_exit_codes_are_distinct_and_documented() -> None:
    codes = [
        cli.EXIT_OK, cli.EXIT_ERROR, cli.EXIT_USAGE, cli.EXIT_NOT_FOUND, cli.EXIT_PRECONDITION,
        cli.EXIT_TOO_LARGE, cli.EXIT_INVALID, cli.EXIT_CONFLICT,
    ]  # fmt: skip
    assert codes == list(range(8))
    table = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    for code in codes:
        assert f"\n| {code} | " in table


# One failure of each kind, for each command.


def test_session_failures(project: Project) -> None:
    create = ("session", "create", "--project", "acme", "--agent", "support-bot")
    missing = fails(*create, "--memory", "notes=missing")
    assert str(missing) == "memory.notes: document 'missing' does not exist; create it first."
    assert missing.returncode == cli.EXIT_INVALID
    assert fails("session", "show", "ses_nope").returncode == cli.EXIT_NOT_FOUND
    assert str(fails("session", "end", "ses_nope")) == "No session 'ses_nope'."
    assert fails(*create, "--label", "nolabel").returncode == cli.EXIT_INVALID
    twice = fails(*create, "--memory", "kb", "--memory", "kb=faq")
    assert (str(twice), twice.returncode) == (
        "Resource 'kb' is bound twice; bind each resource once.",
        cli.EXIT_INVALID,
    )
    unknown = fails("session", "list", "--project", "nope")
    assert (str(unknown), unknown.returncode) == ("No project 'nope'.", cli.EXIT_NOT_FOUND)
    assert not Session.objects.exists()


def test_secret_failures(project: Project) -> None:
    gone = fails("secret", "delete", "--project", "acme", "MEMORY_TOKEN")
    assert (str(gone), gone.returncode) == (
        "No secret 'MEMORY_TOKEN' in development.",
        cli.EXIT_NOT_FOUND,
    )
    bad = fails("secret", "set", "--project", "acme", "T", stdin="a\nb\n")
    assert bad.returncode == cli.EXIT_INVALID
    assert fails("secret", "list", "--project", "nope").returncode == cli.EXIT_NOT_FOUND
    assert not Secret.objects.exists()


def test_secret_defaults_to_development_like_memory(project: Project) -> None:
    origin = ["--origin", "https://memory.example.com"]
    assert "in acme/development" in run(
        "secret", "set", "--project", "acme", *origin, "T", stdin="v\n"
    )
    assert list(Secret.objects.values_list("environment", "name")) == [("development", "T")]
    assert run("secret", "list", "--project", "acme").startswith("T\t")
    assert run("secret", "list", "--project", "acme", "--environment", "production") == ""
    run("secret", "delete", "--project", "acme", "T")
    assert not Secret.objects.exists()


def test_grant_failures(project: Project) -> None:
    unknown = fails("grant", "ghost", "acme", "--role", "viewer")
    assert (str(unknown), unknown.returncode) == (
        "No user 'ghost'. Add --create to create it.",
        cli.EXIT_NOT_FOUND,
    )
    get_user_model().objects.create_user(username="alice", password="pw-123456789")
    no_project = fails("grant", "alice", "nope", "--role", "viewer")
    assert (str(no_project), no_project.returncode) == ("No project 'nope'.", cli.EXIT_NOT_FOUND)
    assert not ProjectRole.objects.exists()


def test_grant_revoke_of_an_unknown_user_says_so(project: Project) -> None:
    error = fails("grant", "ghost", "acme", "--revoke")
    assert (str(error), error.returncode) == ("No user 'ghost'.", cli.EXIT_NOT_FOUND)
    assert not AuditEntry.objects.filter(action="role.revoke").exists()


def test_createproject_and_createapikey_failures(project: Project) -> None:
    taken = fails("createproject", "acme")
    assert (str(taken), taken.returncode) == ("Project 'acme' already exists.", cli.EXIT_CONFLICT)
    assert fails("createproject", "Bad Id").returncode == cli.EXIT_INVALID
    assert list(Project.objects.values_list("id", flat=True)) == ["acme"]
    key = fails("createapikey", "--project", "ghost")
    assert (str(key), key.returncode) == ("No project 'ghost'.", cli.EXIT_NOT_FOUND)
    assert not ApiKey.objects.exists()


def test_deploy_failures(project: Project, tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    deploy = ("deploy", "--project", "acme", "--environment", "development")
    unreadable = fails(*deploy, "--manifest", tmp_path / "missing.json")
    assert str(unreadable) == f"Cannot read {tmp_path}/missing.json: No such file or directory."
    assert unreadable.returncode == cli.EXIT_INVALID
    manifest.write_text(json.dumps(["not", "an", "object"]))
    assert fails(*deploy, "--manifest", manifest).returncode == cli.EXIT_INVALID
    # notes is a document resource: declaring it as an http one is a conflict.
    http_notes = reference_declaration(
        resource_id="notes", base_url="http://127.0.0.1:9", description="Notes."
    )
    manifest.write_text(json.dumps({"agent": "support-bot", "memory": [http_notes]}))
    conflict = fails(*deploy, "--manifest", manifest)
    assert conflict.returncode == cli.EXIT_CONFLICT
    assert "changing provider kind requires a new resource" in str(conflict)
    assert fails("deploy", "--project", "nope", "--environment", "development",
                 "--manifest", manifest).returncode == cli.EXIT_NOT_FOUND  # fmt: skip
    assert Deployment.objects.count() == 1


# Session bindings from the command line.


def test_session_create_binds_a_namespace(project: Project) -> None:
    facts = reference_declaration(
        resource_id="facts", base_url="http://127.0.0.1:9", description="Facts."
    )
    deployment_create(
        project=project, agent="researcher", memory=[facts], promote="development", actor="t"
    )
    args = ("session", "create", "--project", "acme", "--agent", "researcher", "--json")
    body = json.loads(run(*args, "--namespace", "facts=user-42"))
    assert body["session"]["memory"] == [
        {
            "resource": "facts",
            "scope": "namespace",
            "id": "user-42",
            "access": "read-write",
            "partition": partition_key(
                project_id="acme",
                environment="development",
                resource_id="facts",
                namespace="user-42",
            ),
            "writable": True,
        }
    ]
    binding = Binding.objects.get(session_id=body["session"]["id"])
    assert (binding.scope, binding.target_id, binding.access) == (
        "namespace",
        "user-42",
        "read-write",
    )

    read_only = json.loads(run(*args, "--namespace", "facts=user-42:read"))["session"]["memory"]
    assert (read_only[0]["access"], read_only[0]["writable"]) == ("read", False)

    bad = fails(*args, "--namespace", "facts=no/slashes")
    assert bad.returncode == cli.EXIT_INVALID
    assert str(bad).startswith("memory.facts: Namespace ids are")
    assert Session.objects.count() == 2


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_output_to_a_pipe_its_reader_left_is_one_error_line(tmp_path: Path, buffered: bool) -> None:
    """`manage.py erasure key | head -c 0`: the reader leaves before the command writes,
    and the command ends with its one line and exit code 1, not a traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = clean_env(MEMORYADMIN_DEV_SECRETS="1", MEMORYADMIN_VAR_DIR=str(tmp_path / "var"))
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    with os.fdopen(write_end, "wb") as stdout:
        done = subprocess.run(
            [sys.executable, "manage.py", "erasure", "key"],
            cwd=ROOT,
            env=env,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == cli.EXIT_ERROR
    assert done.stderr == (
        "Error: Cannot write to standard output: Broken pipe (its reader has left).\n"
    )
