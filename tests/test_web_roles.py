"""Roles on projects: the grant command, the permission table, and the demo logins."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from memoryadmin.core.errors import Forbidden, ProjectNotFound
from memoryadmin.memory.models import AuditEntry, Document, Project
from memoryadmin.web.models import ProjectRole
from memoryadmin.web.services.roles import (
    DELETE,
    EDIT,
    EXPORT,
    FREEZE,
    READ,
    SESSION_END,
    membership_get,
    membership_require,
)
from tests.helpers import People, password_login

pytestmark = pytest.mark.django_db


def grant(*args: str) -> str:
    out = io.StringIO()
    call_command("grant", *args, stdout=out)
    return out.getvalue()


def test_grant_gives_a_user_a_role_and_records_it(project: Project) -> None:
    get_user_model().objects.create_user(username="alice", password="pw-123456789")
    assert grant("alice", "acme", "--role", "support") == "alice is support of acme\n"
    assert ProjectRole.objects.get(user__username="alice", project=project).role == "support"
    entry = AuditEntry.objects.get(action="role.grant")
    assert entry.actor.startswith("cli:")
    assert entry.detail == {"user": "alice", "role": "support"}


def test_grant_again_replaces_the_role(project: Project) -> None:
    get_user_model().objects.create_user(username="alice", password="pw-123456789")
    grant("alice", "acme", "--role", "viewer")
    grant("alice", "acme", "--role", "owner")
    assert list(ProjectRole.objects.values_list("role", flat=True)) == ["owner"]


def test_grant_revoke_removes_the_role(project: Project) -> None:
    get_user_model().objects.create_user(username="alice", password="pw-123456789")
    grant("alice", "acme", "--role", "viewer")
    assert grant("alice", "acme", "--revoke") == "alice lost their role\n"
    assert not ProjectRole.objects.exists()
    assert grant("alice", "acme", "--revoke") == "alice had no role\n"


def test_grant_to_an_unknown_user_fails_with_a_hint(project: Project) -> None:
    with pytest.raises(CommandError, match=r"No user 'ghost'\. Add --create"):
        grant("ghost", "acme", "--role", "viewer")
    assert not ProjectRole.objects.exists()


def test_grant_on_an_unknown_project_fails(project: Project) -> None:
    get_user_model().objects.create_user(username="alice", password="pw-123456789")
    with pytest.raises(CommandError, match="No project 'nosuch'"):
        grant("alice", "nosuch", "--role", "viewer")


def test_grant_rejects_unknown_roles(project: Project) -> None:
    with pytest.raises(CommandError, match="invalid choice: 'admin'"):
        grant("alice", "acme", "--role", "admin")


def test_grant_create_makes_a_login_that_works(project: Project) -> None:
    out = grant("alice", "acme", "--role", "viewer", "--create")
    password = out.splitlines()[-1].rsplit(" ", 1)[-1]
    assert out.startswith("alice is viewer of acme\nPassword for alice (shown once): ")
    client = Client()
    assert password_login(client, "alice", password)
    assert client.get("/projects/acme/development/").status_code == 200


def test_grant_create_on_an_unknown_project_creates_no_user(project: Project) -> None:
    with pytest.raises(CommandError):
        grant("alice", "nosuch", "--role", "viewer", "--create")
    assert not get_user_model().objects.filter(username="alice").exists()


EXPECTED = {
    "owner": {READ, FREEZE, EXPORT, SESSION_END, EDIT, DELETE},
    "support": {READ, FREEZE, EXPORT, SESSION_END},
    "viewer": {READ},
}


@pytest.mark.parametrize("persona", ["owner", "support", "viewer"])
def test_each_role_has_exactly_its_permissions(persona: str, people: People) -> None:
    membership = membership_get(user=getattr(people, persona), project_id="acme")
    assert membership.role == persona
    for permission in (READ, FREEZE, EXPORT, SESSION_END, EDIT, DELETE):
        if permission in EXPECTED[persona]:
            membership_require(membership=membership, permission=permission)
        else:
            with pytest.raises(Forbidden):
                membership_require(membership=membership, permission=permission)


PROJECT = "/projects/acme/development"
# The tables the erasure, bulk and containment views read or write; a refusal reads none.
VIEW_TABLES = ("memory_document", "memory_auditentry", "incidents_incident", "erasures_erasure")


@pytest.mark.parametrize(
    ("persona", "method", "path", "data", "refusal"),
    [
        (
            "viewer",
            "post",
            "/erasures/",
            {"field": "text", "value": "x", "reason": "r"},
            "The viewer role may not preview erasures",
        ),
        (
            "support",
            "post",
            "/erasures/",
            {"field": "text", "value": "x", "reason": "r", "erase": "1", "confirm": "x"},
            "The support role may not erase memory for good",
        ),
        # A resource that does not exist: refused before it is looked for.
        (
            "support",
            "post",
            "/resources/nosuch/bulk/",
            {"action": "delete", "doc": ["a:1"], "confirm": "yes"},
            "The support role may not delete documents",
        ),
        (
            "viewer",
            "post",
            "/resources/notes/bulk/",
            {"action": "export", "doc": ["a:1"]},
            "The viewer role may not freeze or unfreeze documents",
        ),
        # An incident that does not exist: refused before it is looked for.
        (
            "support",
            "post",
            "/incidents/inc_nosuch/contain/",
            {"confirm": "yes"},
            "The support role may not contain incidents beyond a freeze",
        ),
        (
            "support",
            "get",
            "/incidents/inc_nosuch/contain/",
            {},
            "The support role may not contain incidents beyond a freeze",
        ),
        (
            "viewer",
            "post",
            "/incidents/inc_nosuch/contain/",
            {"action": "freeze"},
            "The viewer role may not open incidents or dry-run their containment",
        ),
        (
            "viewer",
            "get",
            "/incidents/inc_nosuch/",
            {"dryRun": "true"},
            "The viewer role may not open incidents or dry-run their containment",
        ),
    ],
)
def test_a_member_without_the_role_is_refused_before_anything_is_read(
    persona: str,
    method: str,
    path: str,
    data: dict[str, Any],
    refusal: str,
    web: Any,
    make_document: Any,
) -> None:
    """The erasure, bulk and containment views need a permission that depends on the
    request (erase or preview, the bulk action, contain or freeze or dry-run): the page's
    door decides it before the view runs, as for every other page."""
    make_document("a")
    client = web(persona)
    before = sorted(AuditEntry.objects.values_list("pk", flat=True))
    with CaptureQueriesContext(connection) as queries:
        response = getattr(client, method)(PROJECT + path, data)
    assert response.status_code == 403, response.content.decode()[:500]
    assert refusal in response.content.decode()
    read = [q["sql"] for q in queries if any(name in q["sql"] for name in VIEW_TABLES)]
    assert read == []
    assert sorted(AuditEntry.objects.values_list("pk", flat=True)) == before
    assert Document.objects.get(doc_id="a").agent_writes is True
    assert not Document.objects.filter(deleted=True).exists()


def test_a_user_without_a_role_meets_the_missing_project_answer(people: People) -> None:
    with pytest.raises(ProjectNotFound, match="No project 'acme'") as no_role:
        membership_get(user=people.outsider, project_id="acme")
    with pytest.raises(ProjectNotFound, match="No project 'nosuch'") as missing:
        membership_get(user=people.outsider, project_id="nosuch")
    assert no_role.value.status == missing.value.status == 404


def test_inactive_users_lose_their_projects(people: People) -> None:
    people.owner.is_active = False
    people.owner.save()
    with pytest.raises(ProjectNotFound):
        membership_get(user=people.owner, project_id="acme")


# The demo set-up


@pytest.fixture
def var_dir(tmp_path: Path, settings: Any) -> Path:
    settings.VAR_DIR = tmp_path
    return tmp_path


def run_demo() -> str:
    out = io.StringIO()
    call_command("demo", "--base-url", "http://127.0.0.1:8102", stdout=out)
    return out.getvalue()


def test_demo_creates_a_login_of_each_role_and_prints_them(db: None, var_dir: Path) -> None:
    out = run_demo()
    saved = json.loads((var_dir / "demo-logins.json").read_text())
    assert set(saved) == {"demo-owner", "demo-support", "demo-viewer"}
    assert oct((var_dir / "demo-logins.json").stat().st_mode & 0o777) == "0o600"
    assert "Memory page: http://127.0.0.1:8102/" in out
    assert f"owner:    demo-owner / {saved['demo-owner']}" in out
    assert f"support:  demo-support / {saved['demo-support']}" in out
    assert f"viewer:   demo-viewer / {saved['demo-viewer']}" in out
    roles = dict(ProjectRole.objects.values_list("user__username", "role"))
    assert roles == {"demo-owner": "owner", "demo-support": "support", "demo-viewer": "viewer"}
    client = Client()
    assert password_login(client, "demo-support", saved["demo-support"])
    assert client.get("/projects/demo/development/resources/notes/").status_code == 200
    viewer = Client()
    assert password_login(viewer, "demo-viewer", saved["demo-viewer"])
    assert viewer.get("/projects/demo/development/resources/notes/").status_code == 200


def test_demo_twice_keeps_the_logins(db: None, var_dir: Path) -> None:
    run_demo()
    saved = json.loads((var_dir / "demo-logins.json").read_text())
    grants = AuditEntry.objects.filter(action="role.grant").count()
    out = run_demo()
    assert "created: nothing (already set up)" in out
    assert json.loads((var_dir / "demo-logins.json").read_text()) == saved
    assert AuditEntry.objects.filter(action="role.grant").count() == grants
    assert password_login(Client(), "demo-owner", saved["demo-owner"])


def test_demo_repairs_a_login_whose_password_file_was_lost(db: None, var_dir: Path) -> None:
    run_demo()
    (var_dir / "demo-logins.json").unlink()
    out = run_demo()
    saved = json.loads((var_dir / "demo-logins.json").read_text())
    assert "login demo-owner" in out
    assert password_login(Client(), "demo-owner", saved["demo-owner"])
    assert get_user_model().objects.filter(username="demo-owner").count() == 1


def test_demo_project_is_created_as_createproject_creates_one_audited_once(
    db: None, var_dir: Path
) -> None:
    out = run_demo()
    assert "project demo" in out
    made = AuditEntry.objects.filter(project_id="demo", action="project.create")
    assert [(e.actor, e.environment, e.detail) for e in made] == [
        ("demo", "", {"name": "Demo project"})
    ]
    assert Project.objects.get(id="demo").name == "Demo project"
    run_demo()
    assert AuditEntry.objects.filter(action="project.create").count() == 1


def test_demo_logins_and_key_are_made_audited_by_the_demo_once(db: None, var_dir: Path) -> None:
    run_demo()
    invited = AuditEntry.objects.filter(project_id="demo", action="user.invite")
    assert sorted((e.actor, e.detail["user"], e.detail["role"]) for e in invited) == [
        ("demo", "demo-owner", "owner"),
        ("demo", "demo-support", "support"),
        ("demo", "demo-viewer", "viewer"),
    ]
    keys = AuditEntry.objects.filter(project_id="demo", action="apikey.create")
    assert [e.actor for e in keys] == ["demo"]
    saved = json.loads((var_dir / "demo-logins.json").read_text())
    assert password_login(Client(), "demo-viewer", saved["demo-viewer"])
    run_demo()
    assert AuditEntry.objects.filter(action="user.invite").count() == 3
    assert AuditEntry.objects.filter(action="apikey.create").count() == 1
