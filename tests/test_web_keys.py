"""The Keys page: owners list, create (the secret shown once) and revoke a project's
API keys, and see who of the project is locked out of logging in."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from html import unescape
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from memoryadmin.memory.models import ApiKey, AuditEntry, Project
from tests.helpers import PASSWORD, Keys, People

pytestmark = pytest.mark.django_db

BASE = "/projects/acme/development"
KEYS = f"{BASE}/keys/"
HX = {"HTTP_HX_REQUEST": "true"}
DAY = timedelta(days=1)
API = "/api/managed-agents/projects/acme"


@pytest.fixture
def client(people: People, web_client_for: Callable[[Any], Client]) -> Callable[[str], Client]:
    return lambda persona: web_client_for(getattr(people, persona))


def key_of(secret: str) -> ApiKey:
    return ApiKey.objects.get(prefix=secret[:12])


def api_status(client_for: Any, secret: str) -> int:
    return int(client_for(secret).get(API).status_code)


def test_owner_sees_the_projects_keys_and_a_keys_tab(client: Any, keys: Keys) -> None:
    response = client("owner").get(KEYS)
    assert response.status_code == 200
    html = response.content.decode()
    assert f"<code>{keys.owner[:12]}&hellip;</code>" in html
    assert f"<code>{keys.read_only[:12]}&hellip;</code>" in html
    assert keys.other[:12] not in html
    assert keys.all_projects[:12] not in html
    for secret in (keys.owner, keys.read_only):
        assert secret not in html
        assert key_of(secret).hashed not in html
    assert f'href="{KEYS}" aria-current="page">Keys</a>' in html
    # Scripts only from files (the Content-Security-Policy allows no inline script).
    assert all("src=" in tag for tag in re.findall(r"<script[^>]*>", html))


def test_the_page_shows_keys_in_use_and_those_revoked_lately(client: Any, keys: Keys) -> None:
    now = timezone.now()
    ApiKey.objects.bulk_create(
        [
            ApiKey(project_id="acme", prefix="mak_lately00", hashed="a", revoked_at=now),
            ApiKey(project_id="acme", prefix="mak_graced00", hashed="b", revoked_at=now + DAY),
            ApiKey(project_id="acme", prefix="mak_long_ago", hashed="c", revoked_at=now - 31 * DAY),
        ]
    )
    html = client("owner").get(KEYS).content.decode()
    for prefix in (keys.owner[:12], "mak_lately00", "mak_graced00"):
        assert f"<code>{prefix}&hellip;</code>" in html
    assert "mak_long_ago" not in html
    assert "Keys revoked more than 30 days ago are not shown here" in html


@pytest.mark.parametrize("persona", ["support", "viewer"])
def test_other_roles_may_not_manage_keys(client: Any, keys: Keys, persona: str) -> None:
    user = client(persona)
    assert user.get(f"{BASE}/audit/").content.decode().count(">Keys</a>") == 0
    key = key_of(keys.read_only)
    for response in [
        user.get(KEYS),
        user.post(f"{KEYS}new/", {"name": "mine"}),
        user.get(f"{KEYS}{key.pk}/revoke/"),
        user.post(f"{KEYS}{key.pk}/revoke/"),
    ]:
        assert response.status_code == 403
        assert b"may not manage API keys" in response.content
    assert ApiKey.objects.count() == 4
    assert key_of(keys.read_only).revoked_at is None


def test_an_outsider_gets_404(client: Any, keys: Keys) -> None:
    assert client("outsider").get(KEYS).status_code == 404
    assert client("outsider").post(f"{KEYS}new/", {"name": "x"}).status_code == 404
    assert ApiKey.objects.count() == 4


def test_create_shows_the_key_once_with_a_copy_button(
    client: Any, project: Project, client_for: Any
) -> None:
    owner = client("owner")
    created = owner.post(f"{KEYS}new/", {"name": "ci", "read_only": "on"})
    # POST/redirect/GET: the secret waits in the session for the page redirected to.
    assert created.status_code == 302
    assert created["Location"] == KEYS
    response = owner.get(KEYS)
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    html = response.content.decode()
    match = re.search(r'id="new-key-secret"[^>]*value="(mak_[^"]+)"', html)
    assert match is not None
    secret = match.group(1)
    assert 'data-copy="new-key-secret"' in html
    key = key_of(secret)
    # The heading names the key by its prefix, cut with an ellipsis (it read "&hellip;").
    heading = re.search(r'<h2 id="new-key-secret-title">([^<]*)</h2>', html)
    assert heading is not None
    assert unescape(heading.group(1)) == f"New key {key.prefix}\u2026 (ci)"
    assert (key.name, key.read_only, key.project_id) == ("ci", True, "acme")
    assert api_status(client_for, secret) == 200
    entry = AuditEntry.objects.get(action="apikey.create", actor="user:olivia")
    assert entry.detail["key"] == key.prefix
    # Never again.
    again = owner.get(KEYS).content.decode()
    assert secret not in again
    assert f"<code>{key.prefix}&hellip;</code>" in again


def test_a_new_key_is_shown_on_its_own_projects_page_only(client: Any, project: Project) -> None:
    owner = client("owner")
    assert owner.post(f"{KEYS}new/", {"name": "ci"}).status_code == 302
    # The page of another environment, opened before the one redirected to (another tab),
    # neither shows the secret nor takes it away from the page it belongs to.
    elsewhere = owner.get("/projects/acme/production/keys/")
    assert elsewhere.status_code == 200
    assert 'id="new-key-secret"' not in elsewhere.content.decode()
    html = owner.get(KEYS).content.decode()
    match = re.search(r'id="new-key-secret"[^>]*value="(mak_[^"]+)"', html)
    assert match is not None
    assert key_of(match.group(1)).name == "ci"


def test_create_with_a_bad_name_is_422_and_creates_nothing(client: Any, project: Project) -> None:
    response = client("owner").post(f"{KEYS}new/", {"name": "x" * 201})
    assert response.status_code == 422
    assert b"at most 200 characters" in response.content
    assert not ApiKey.objects.exists()


def test_revoke_asks_then_refuses_the_key_at_once(client: Any, keys: Keys, client_for: Any) -> None:
    owner = client("owner")
    key = key_of(keys.read_only)
    assert api_status(client_for, keys.read_only) == 200
    confirm = owner.get(f"{KEYS}{key.pk}/revoke/")
    assert confirm.status_code == 200
    assert f"Revoke key <code>{key.prefix}&hellip;</code>" in confirm.content.decode()
    assert key_of(keys.read_only).revoked_at is None  # asking changes nothing
    panel = owner.get(f"{KEYS}{key.pk}/revoke/", **HX)
    assert panel.status_code == 200
    assert b"<html" not in panel.content
    done = owner.post(f"{KEYS}{key.pk}/revoke/", follow=True)
    assert done.redirect_chain == [(KEYS, 302)]
    assert f"Revoked {key.prefix}…" in done.content.decode()
    assert key_of(keys.read_only).revoked_at is not None
    assert api_status(client_for, keys.read_only) == 401
    assert AuditEntry.objects.get(action="apikey.revoke").actor == "user:olivia"
    again = owner.post(f"{KEYS}{key.pk}/revoke/", follow=True)
    assert "was already revoked" in again.content.decode()
    assert AuditEntry.objects.filter(action="apikey.revoke").count() == 1


@pytest.mark.parametrize("which", ["other", "all_projects"])
def test_revoke_of_a_key_outside_the_project_is_404(client: Any, keys: Keys, which: str) -> None:
    key = key_of(getattr(keys, which))
    assert client("owner").post(f"{KEYS}{key.pk}/revoke/").status_code == 404
    assert key_of(getattr(keys, which)).revoked_at is None


def test_owners_see_who_of_the_project_is_locked_out(client: Any, people: People) -> None:
    for name in ("sam", "oscar"):
        for _ in range(5):
            Client().post("/login/", {"username": name, "password": "wrong"})
    html = client("owner").get(KEYS).content.decode()
    assert "<strong>sam</strong>: 5 failed logins" in html
    assert "axes_reset_username sam" in html
    assert "oscar" not in html  # not a member of acme
    assert Client().post("/login/", {"username": "sam", "password": PASSWORD}).status_code == 429
