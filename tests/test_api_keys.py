"""API keys have a life: list, create, revoke and rotate from the CLI and the API,
audited; revoked keys are refused at once; last use is written once a minute."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.cache import cache
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from memoryadmin.core import cli
from memoryadmin.memory.models import ApiKey, AuditEntry, Project, Resource
from memoryadmin.memory.representations import api_key_dict
from memoryadmin.memory.services import keys as keys_service
from memoryadmin.memory.services.keys import api_key_create
from tests.helpers import DEV, DOCS, Keys, python

KEYS = "/api/managed-agents/projects/acme/api-keys"
PROJECT = "/api/managed-agents/projects/acme"
ACTOR = f"cli:{getpass.getuser()}"


@pytest.fixture(autouse=True)
def _cached_look_ups(settings: Any) -> None:
    """Key look-ups cached as with Redis: revocation must still be seen at once."""
    settings.MEMORYADMIN_API_KEY_CACHE_SECONDS = 5


def apikey(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("apikey", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def key_of(secret: str) -> ApiKey:
    return ApiKey.objects.get(prefix=secret[:12])


def works(client_for: Any, secret: str) -> int:
    return int(client_for(secret).get(PROJECT).status_code)


# The command line.


def test_cli_create_prints_the_secret_last_stores_a_hash_and_audits(project: Project) -> None:
    out, err = apikey("create", "--project", "acme", "--name", "ci", "--read-only")
    secret = out.strip().splitlines()[-1]
    key = key_of(secret)
    assert (key.project_id, key.name, key.read_only) == ("acme", "ci", True)
    assert secret not in key.hashed
    assert secret.startswith("mak_")
    assert f"read-only key {key.prefix}… (id {key.pk}) for project acme" in err
    entry = AuditEntry.objects.get(action="apikey.create")
    assert (entry.project_id, entry.actor) == ("acme", ACTOR)
    assert entry.detail == {"key": key.prefix, "id": key.pk, "name": "ci", "readOnly": True}


def test_cli_all_projects_key_is_audited_without_a_project(db: None) -> None:
    out, _ = apikey("create", "--all-projects", "--json")
    body = json.loads(out)
    assert body["scope"] == "*"
    assert body["secret"].startswith("mak_")
    entry = AuditEntry.objects.get(action="apikey.create")
    assert entry.project_id is None
    assert entry.detail["key"] == body["prefix"]


def test_cli_list_shows_every_field_but_never_a_secret(keys: Keys) -> None:
    out, _ = apikey("list", "--project", "acme", "--json")
    rows = json.loads(out)["apiKeys"]
    assert {row["prefix"] for row in rows} == {keys.owner[:12], keys.read_only[:12]}
    assert set(rows[0]) == {
        "id", "name", "prefix", "scope", "readOnly", "createdAt", "lastUsedAt", "revokedAt",
    }  # fmt: skip
    assert keys.owner not in out
    everything, _ = apikey("list")
    assert len(everything.strip().splitlines()) == 4
    only_global, _ = apikey("list", "--all-projects", "--json")
    assert [r["prefix"] for r in json.loads(only_global)["apiKeys"]] == [keys.all_projects[:12]]


def test_cli_revoke_refuses_the_key_on_its_next_request(keys: Keys, client_for: Any) -> None:
    assert works(client_for, keys.owner) == 200  # now cached
    key = key_of(keys.owner)
    out, _ = apikey("revoke", str(key.pk))
    assert out.startswith(f"Revoked {key.prefix}… (id {key.pk}) at ")
    response = client_for(keys.owner).get(PROJECT)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert key_of(keys.owner).revoked_at is not None
    assert AuditEntry.objects.filter(action="apikey.revoke", actor=ACTOR).count() == 1
    # Again: nothing changes, nothing more is audited.
    revoked_at = key_of(keys.owner).revoked_at
    apikey("revoke", key.prefix)
    assert key_of(keys.owner).revoked_at == revoked_at
    assert AuditEntry.objects.filter(action="apikey.revoke").count() == 1
    assert works(client_for, keys.read_only) == 200


def test_cli_revoke_of_an_unknown_key_is_not_found(db: None) -> None:
    with pytest.raises(CommandError, match="No API key '99999'") as caught:
        apikey("revoke", "99999")
    assert caught.value.returncode == cli.EXIT_NOT_FOUND


def test_cli_rotate_without_grace_ends_the_old_key_now(keys: Keys, client_for: Any) -> None:
    assert works(client_for, keys.owner) == 200
    old = key_of(keys.owner)
    out, err = apikey("rotate", str(old.pk))
    new_secret = out.strip().splitlines()[-1]
    new = key_of(new_secret)
    assert (new.project_id, new.read_only, new.name) == (old.project_id, old.read_only, old.name)
    assert f"The old key {old.prefix}… stops working now." in err
    assert works(client_for, keys.owner) == 401
    assert works(client_for, new_secret) == 200
    entry = AuditEntry.objects.get(action="apikey.rotate")
    assert entry.detail["newKey"] == new.prefix
    assert entry.detail["graceSeconds"] == 0


def test_cli_rotate_with_grace_keeps_the_old_key_until_then(keys: Keys, client_for: Any) -> None:
    old = key_of(keys.owner)
    before = timezone.now()
    out, _ = apikey("rotate", str(old.pk), "--grace", "3600")
    revoked_at = key_of(keys.owner).revoked_at
    assert revoked_at is not None
    assert before + timedelta(seconds=3600) <= revoked_at <= timezone.now() + timedelta(hours=1)
    assert works(client_for, keys.owner) == 200
    assert works(client_for, out.strip().splitlines()[-1]) == 200
    # Revoking cuts the grace period short.
    apikey("revoke", str(old.pk))
    assert works(client_for, keys.owner) == 401


def test_cli_rotate_of_a_revoked_key_is_a_conflict(keys: Keys) -> None:
    key = key_of(keys.owner)
    apikey("revoke", str(key.pk))
    with pytest.raises(CommandError, match="is revoked"):
        apikey("rotate", str(key.pk))
    assert ApiKey.objects.count() == 4


@pytest.mark.parametrize("grace", ["-1", "2592001"])
def test_cli_rotate_with_a_bad_grace_changes_nothing(keys: Keys, grace: str) -> None:
    with pytest.raises(CommandError, match="graceSeconds must be between 0") as caught:
        apikey("rotate", str(key_of(keys.owner).pk), "--grace", grace)
    assert caught.value.returncode == cli.EXIT_INVALID
    assert key_of(keys.owner).revoked_at is None
    assert ApiKey.objects.count() == 4


def test_createapikey_is_apikey_create(project: Project) -> None:
    out = StringIO()
    call_command(
        "createapikey", "--project", "acme", "--name", "old", stdout=out, stderr=StringIO()
    )
    assert key_of(out.getvalue().strip().splitlines()[-1]).name == "old"


# The management API.


def test_api_lists_the_projects_keys_only(keys: Keys, api: APIClient) -> None:
    response = api.get(KEYS)
    assert response.status_code == 200
    rows = response.json()["apiKeys"]
    assert {row["prefix"] for row in rows} == {keys.owner[:12], keys.read_only[:12]}
    assert all(row["scope"] == "acme" and "secret" not in row for row in rows)
    assert keys.owner not in response.content.decode()


@pytest.mark.parametrize("which", ["read_only", "other"])
def test_api_keys_need_a_read_write_key_of_the_project(
    keys: Keys, client_for: Any, which: str
) -> None:
    client = client_for(getattr(keys, which))
    for response in [
        client.get(KEYS),
        client.post(KEYS, {"name": "x"}, format="json"),
        client.post(f"{KEYS}/{key_of(keys.owner).pk}/revoke"),
    ]:
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "forbidden"
    assert ApiKey.objects.count() == 4
    assert key_of(keys.owner).revoked_at is None


def test_api_create_shows_the_secret_once_and_it_works(
    keys: Keys, api: APIClient, client_for: Any
) -> None:
    response = api.post(KEYS, {"name": "deploy bot", "readOnly": True}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert body["name"] == "deploy bot"
    assert body["readOnly"] is True
    assert body["scope"] == "acme"
    assert works(client_for, body["secret"]) == 200
    assert "secret" not in json.dumps(api.get(KEYS).json())
    key = key_of(body["secret"])
    assert key.read_only
    assert key.project_id == "acme"
    entry = AuditEntry.objects.get(action="apikey.create", actor=f"key:{keys.owner[:12]}")
    assert entry.detail["id"] == key.pk


@pytest.mark.parametrize(
    "body",
    [{"scope": "*"}, {"readOnly": "yes"}, {"name": 5}, {"name": "x" * 201}, {"name": "a\nb"}, []],
)
def test_api_create_with_bad_input_is_400_and_creates_nothing(
    keys: Keys, api: APIClient, body: Any
) -> None:
    response = api.post(KEYS, body, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["code"] == "invalid_request"
    assert ApiKey.objects.count() == 4


def test_api_revoke_refuses_the_key_at_once(keys: Keys, api: APIClient, client_for: Any) -> None:
    assert works(client_for, keys.read_only) == 200
    key = key_of(keys.read_only)
    response = api.post(f"{KEYS}/{key.pk}/revoke")
    assert response.status_code == 200
    assert response.json()["revokedAt"] is not None
    assert response.json()["prefix"] == key.prefix
    assert works(client_for, keys.read_only) == 401
    assert AuditEntry.objects.get(action="apikey.revoke").actor == f"key:{keys.owner[:12]}"


@pytest.mark.parametrize("which", ["other", "all_projects"])
def test_api_cannot_reach_keys_outside_the_project(keys: Keys, api: APIClient, which: str) -> None:
    key = key_of(getattr(keys, which))
    for action in ["revoke", "rotate"]:
        response = api.post(f"{KEYS}/{key.pk}/{action}", {}, format="json")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "api_key_not_found"
    assert key_of(getattr(keys, which)).revoked_at is None
    assert ApiKey.objects.count() == 4


def test_all_projects_key_manages_project_keys_only(keys: Keys, client_for: Any) -> None:
    response = client_for(keys.all_projects).post(KEYS, {}, format="json")
    assert response.status_code == 201
    assert response.json()["scope"] == "acme"


def test_api_rotate_with_grace(keys: Keys, api: APIClient, client_for: Any) -> None:
    key = key_of(keys.read_only)
    response = api.post(f"{KEYS}/{key.pk}/rotate", {"graceSeconds": 60}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert body["readOnly"] is True
    assert body["prefix"] != key.prefix
    assert works(client_for, keys.read_only) == 200  # in its grace period
    assert works(client_for, body["secret"]) == 200
    bad = api.post(f"{KEYS}/{key.pk}/rotate", {"graceSeconds": "60"}, format="json")
    assert bad.status_code == 400
    assert ApiKey.objects.count() == 5


def test_a_key_is_rotated_once(keys: Keys, api: APIClient, client_for: Any) -> None:
    """A key in its rotation's grace period has its successor: rotating it again is 409 and
    makes no second key (its replacement rotates; revoking ends the grace)."""
    key = key_of(keys.read_only)
    first = api.post(f"{KEYS}/{key.pk}/rotate", {"graceSeconds": 600}, format="json")
    assert first.status_code == 201
    before = (
        list(ApiKey.objects.order_by("pk").values_list("pk", "revoked_at")),
        AuditEntry.objects.count(),
    )
    for grace in (600, 0):
        again = api.post(f"{KEYS}/{key.pk}/rotate", {"graceSeconds": grace}, format="json")
        assert again.status_code == 409
        error = again.json()["error"]
        assert error["code"] == "conflict"
        # The end in the one time format every door shows (as `revokedAt` is).
        ends = api_key_dict(ApiKey.objects.get(pk=key.pk))["revokedAt"]
        assert error["message"] == (
            f"API key {key.prefix}… was rotated already and ends at {ends}; rotate the key "
            "that replaced it, or revoke this one to end it now."
        )
    with pytest.raises(CommandError, match="was rotated already") as caught:
        apikey("rotate", str(key.pk))
    assert caught.value.returncode == cli.EXIT_CONFLICT
    assert f"ends at {ends};" in str(caught.value)
    assert (
        list(ApiKey.objects.order_by("pk").values_list("pk", "revoked_at")),
        AuditEntry.objects.count(),
    ) == before
    assert works(client_for, keys.read_only) == 200  # in its grace period still
    replaced = api.post(f"{KEYS}/{first.json()['id']}/rotate", {}, format="json")
    assert replaced.status_code == 201


def test_a_key_in_its_grace_period_manages_no_keys(
    keys: Keys, api: APIClient, client_for: Any
) -> None:
    owner = key_of(keys.owner)
    rotated = api.post(f"{KEYS}/{owner.pk}/rotate", {"graceSeconds": 600}, format="json")
    assert rotated.status_code == 201
    replacement = rotated.json()
    leaked = client_for(keys.owner)
    assert works(client_for, keys.owner) == 200  # memory still, until its grace ends
    before = list(ApiKey.objects.order_by("pk").values_list("pk", "revoked_at"))
    other = key_of(keys.read_only)
    refused = [
        leaked.get(KEYS),
        leaked.post(KEYS, {"name": "persist"}, format="json"),
        leaked.post(f"{KEYS}/{other.pk}/rotate", {"graceSeconds": 0}, format="json"),
        leaked.post(f"{KEYS}/{replacement['id']}/revoke"),
        leaked.post(f"{KEYS}/{owner.pk}/rotate", {"graceSeconds": 0}, format="json"),
    ]
    for response in refused:
        assert response.status_code == 403, response.content
        assert response.json()["error"]["code"] == "forbidden"
        assert "grace period" in response.json()["error"]["message"]
    assert list(ApiKey.objects.order_by("pk").values_list("pk", "revoked_at")) == before
    # The key that replaced it manages keys.
    assert client_for(replacement["secret"]).get(KEYS).status_code == 200


def test_api_revoking_itself_ends_its_own_access(keys: Keys, api: APIClient) -> None:
    assert api.post(f"{KEYS}/{key_of(keys.owner).pk}/revoke").status_code == 200
    assert api.get(KEYS).status_code == 401


# The look-up behind every request.


def test_last_used_is_written_at_most_once_a_minute(
    keys: Keys, client_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = key_of(keys.owner)
    assert key.last_used_at is None
    assert works(client_for, keys.owner) == 200
    first = key_of(keys.owner).last_used_at
    assert first is not None
    earlier = first - timedelta(minutes=5)
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=earlier)
    assert works(client_for, keys.owner) == 200
    assert key_of(keys.owner).last_used_at == earlier  # no write within the minute
    cache.delete(f"apikey-used:{key.pk}")  # the mark's minute is over
    later = keys_service._clock() + keys_service.LAST_USED_EVERY
    monkeypatch.setattr(keys_service, "_clock", lambda: later)  # and this process's
    assert works(client_for, keys.owner) == 200
    assert key_of(keys.owner).last_used_at > first  # type: ignore[operator]


def test_a_lost_mark_is_tried_again_once_the_minute_is_over(
    keys: Keys, client_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert works(client_for, keys.owner) == 200
    key = key_of(keys.owner)
    assert key.last_used_at is not None
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=None)
    cache.clear()  # the shared cache lost the mark within the minute
    assert works(client_for, keys.owner) == 200
    assert key_of(keys.owner).last_used_at is None  # this process made it: no new try
    later = keys_service._clock() + keys_service.LAST_USED_EVERY
    monkeypatch.setattr(keys_service, "_clock", lambda: later)
    assert works(client_for, keys.owner) == 200
    assert key_of(keys.owner).last_used_at is not None


def test_a_mark_another_process_made_is_asked_for_again(keys: Keys, client_for: Any) -> None:
    # This process did not make the mark: each request asks the cache.
    key = key_of(keys.owner)
    cache.add(f"apikey-used:{key.pk}", 1, timeout=60)
    assert works(client_for, keys.owner) == 200
    assert key_of(keys.owner).last_used_at is None
    cache.delete(f"apikey-used:{key.pk}")  # its minute is over
    assert works(client_for, keys.owner) == 200
    assert key_of(keys.owner).last_used_at is not None


def test_a_cached_look_up_trusts_the_cache_until_it_expires(keys: Keys, client_for: Any) -> None:
    # What another instance sees: the row is revoked, its own cache is not told.
    assert works(client_for, keys.owner) == 200
    ApiKey.objects.filter(prefix=keys.owner[:12]).update(revoked_at=timezone.now())
    assert works(client_for, keys.owner) == 200
    cache.delete(keys_service._cache_key(key_of(keys.owner).hashed))  # its 5 seconds are over
    assert works(client_for, keys.owner) == 401


UNUSED_BY_REQUESTS = {"name", "hashed", "created_at", "last_used_at"}


@override_settings(MEMORYADMIN_API_KEY_CACHE_SECONDS=5)
def test_a_requests_key_holds_the_fields_the_request_uses(keys: Keys, notes: Resource) -> None:
    row = key_of(keys.owner)
    read = [
        keys_service.api_key_authenticate(raw=keys.owner),  # from the database
        keys_service.api_key_authenticate(raw=keys.owner),  # from the cache
        keys_service.api_key_authenticate_at(
            raw=keys.owner, project_id="acme", environment="development", resource_id="notes"
        )[0],
    ]
    for key in read:
        assert key is not None
        assert key.get_deferred_fields() == UNUSED_BY_REQUESTS
        fields = ("pk", "project_id", "prefix", "read_only", "revoked_at")
        assert [getattr(key, f) for f in fields] == [getattr(row, f) for f in fields]
    assert read[0] is not None
    assert read[0].name == row.name  # a deferred field is read when used


@pytest.mark.parametrize("cached", [0, 5])
def test_a_document_read_refuses_a_key_once_revoked_or_its_grace_over(
    keys: Keys, client_for: Any, make_document: Any, settings: Any, cached: int
) -> None:
    # The document route reads the key with the document, never from the cache.
    settings.MEMORYADMIN_API_KEY_CACHE_SECONDS = cached
    make_document("workshop", text="Node 22.")
    read = f"{DOCS}/workshop{DEV}"
    owner, reader = client_for(keys.owner), client_for(keys.read_only)
    assert owner.get(read).status_code == 200
    key_services_revoke(keys.owner)
    assert owner.get(read).status_code == 401
    assert reader.get(read).status_code == 200
    ApiKey.objects.filter(prefix=keys.read_only[:12]).update(
        revoked_at=timezone.now() + timedelta(seconds=30)  # a rotation's grace
    )
    assert reader.get(read).status_code == 200
    ApiKey.objects.filter(prefix=keys.read_only[:12]).update(revoked_at=timezone.now())
    assert reader.get(read).status_code == 401


def key_services_revoke(secret: str) -> None:
    keys_service.api_key_revoke(key=key_of(secret), actor="test")


@override_settings(MEMORYADMIN_API_KEY_CACHE_SECONDS=0)
def test_without_a_cache_every_request_reads_the_key(keys: Keys, client_for: Any) -> None:
    assert works(client_for, keys.owner) == 200
    ApiKey.objects.filter(prefix=keys.owner[:12]).update(revoked_at=timezone.now())
    assert works(client_for, keys.owner) == 401


def test_a_created_key_is_usable_and_revocable_by_the_service(project: Project) -> None:
    key, secret = api_key_create(project_id="acme", actor="test")
    assert key.prefix == secret[:12]
    assert key.revoked_at is None


# Rate limits.


def rate_limited(response: Any) -> dict[str, Any]:
    """The error of a 429 within a minute's window, its wait said in both places."""
    assert response.status_code == 429
    retry_after = int(response["Retry-After"])
    assert 1 <= retry_after <= 60
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == "rate_limited"
    assert error["details"] == {"retryAfter": retry_after}
    return error


@override_settings(MEMORYADMIN_API_RATE="3/minute")
def test_rate_limit_per_key_is_429_with_retry_after(keys: Keys, client_for: Any) -> None:
    client = client_for(keys.owner)
    assert [client.get(PROJECT).status_code for _ in range(3)] == [200, 200, 200]
    error = rate_limited(client.get(PROJECT))
    assert error["message"].startswith("This API key is over its request rate (3/minute)")
    # Counted per key: another key of the same project is not limited.
    assert works(client_for, keys.read_only) == 200
    # Public routes carry no key and are not counted.
    assert client_for(None).get("/api/managed-agents/schema/").status_code != 429


@override_settings(MEMORYADMIN_API_RATE="100/minute", MEMORYADMIN_PROJECT_API_RATE="4/minute")
def test_a_projects_keys_together_are_limited_and_no_other_project_is(
    keys: Keys, client_for: Any
) -> None:
    owner, read_only = client_for(keys.owner), client_for(keys.read_only)
    assert [owner.get(PROJECT).status_code for _ in range(2)] == [200, 200]
    assert [read_only.get(PROJECT).status_code for _ in range(2)] == [200, 200]
    # The fifth request of the project, from either key, is over the project's rate.
    for client in (owner, read_only):
        error = rate_limited(client.get(PROJECT))
        assert error["message"].startswith("This project's API keys together are over")
    # A key made now is in the same window: more keys are not more requests.
    fresh = api_key_create(project_id="acme", actor="test")[1]
    assert works(client_for, fresh) == 429
    # Another project is not touched, nor an operator's key of every project.
    assert client_for(keys.other).get("/api/managed-agents/projects/globex").status_code == 200
    assert works(client_for, keys.all_projects) == 200


@override_settings(MEMORYADMIN_API_RATE="2/minute", MEMORYADMIN_PROJECT_API_RATE="100/minute")
def test_a_key_over_its_own_rate_is_told_so_not_its_projects(keys: Keys, client_for: Any) -> None:
    owner = client_for(keys.owner)
    assert [owner.get(PROJECT).status_code for _ in range(2)] == [200, 200]
    error = rate_limited(owner.get(PROJECT))
    assert error["message"].startswith("This API key is over its request rate (2/minute)")
    assert works(client_for, keys.read_only) == 200


# The shared cache.

UNREACHABLE_REDIS = {
    "default": {
        "BACKEND": "memoryadmin.core.rediscache.RedisCache",
        "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens on port 1
    }
}


@override_settings(CACHES=UNREACHABLE_REDIS, MEMORYADMIN_API_RATE="1/minute")
def test_without_a_reachable_cache_keys_still_work_and_nothing_is_limited(
    keys: Keys, client_for: Any
) -> None:
    client = client_for(keys.owner)
    assert [client.get(PROJECT).status_code for _ in range(3)] == [200, 200, 200]
    assert key_of(keys.owner).last_used_at is None  # recorded once the cache is back
    key = key_of(keys.read_only)
    revoked = client.post(f"{KEYS}/{key.pk}/revoke")
    assert revoked.status_code == 200
    assert works(client_for, keys.read_only) == 401


def settings_in_subprocess(
    env: dict[str, str], expression: str
) -> subprocess.CompletedProcess[str]:
    code = f"import memoryadmin.settings as s; print({expression})"
    # Debug mode: these settings are read without the production secrets.
    return python("-c", code, env={**os.environ, "DJANGO_DEBUG": "1", **env})


def test_caches_use_redis_when_redis_url_is_set() -> None:
    redis = settings_in_subprocess(
        {"REDIS_URL": "redis://cache.internal:6379/2"}, "s.CACHES['default']"
    )
    assert "memoryadmin.core.rediscache.RedisCache" in redis.stdout
    assert "redis://cache.internal:6379/2" in redis.stdout
    local = settings_in_subprocess(
        {"REDIS_URL": ""}, "s.CACHES['default']['BACKEND'], s.MEMORYADMIN_API_KEY_CACHE_SECONDS"
    )
    # Per-process caches: key look-ups are not cached, so a revocation holds at once.
    assert local.stdout.strip() == "memoryadmin.core.localcache.LocalCache 0"
    shared = settings_in_subprocess(
        {"REDIS_URL": "redis://cache.internal:6379/2"}, "s.MEMORYADMIN_API_KEY_CACHE_SECONDS"
    )
    assert shared.stdout.strip() == "5"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("MEMORYADMIN_API_RATE", "lots", "MEMORYADMIN_API_RATE must look like 600/minute"),
        ("MEMORYADMIN_API_RATE", "0/minute", "MEMORYADMIN_API_RATE must look like 600/minute"),
        (
            "MEMORYADMIN_PROJECT_API_RATE",
            "5/week",
            "MEMORYADMIN_PROJECT_API_RATE must look like 600/minute",
        ),
        ("MEMORYADMIN_PAGE_RATE", "600", "MEMORYADMIN_PAGE_RATE must look like 600/minute"),
        ("MEMORYADMIN_API_KEY_CACHE_SECONDS", "60", "must be between 0 and 5"),
    ],
)
def test_bad_limits_refuse_to_start(name: str, value: str, message: str) -> None:
    result = settings_in_subprocess({name: value}, "1")
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr


def test_a_project_has_at_most_keys_max_keys_in_use(
    keys: Keys, api: APIClient, client_for: Any
) -> None:
    """Revoked keys do not count, keys in a rotation's grace do; rotating at the cap works
    with no grace period."""
    ApiKey.objects.bulk_create(
        ApiKey(project_id="acme", name=f"k{i}", prefix=f"mak_k{i:07d}", hashed=f"h{i}")
        for i in range(keys_service.KEYS_MAX - 4)  # with the fixture's two and the rotated two
    )
    ApiKey.objects.create(
        project_id="acme",
        name="gone",
        prefix="mak_gone0000",
        hashed="gone",
        revoked_at=timezone.now(),
    )
    grace = api_key_create(project_id="acme", name="graced")[0]
    assert (
        api.post(f"{KEYS}/{grace.pk}/rotate", {"graceSeconds": 60}, format="json").status_code
        == 201
    )
    in_use = ApiKey.objects.filter(project_id="acme", revoked_at=None).count() + 1
    assert in_use == keys_service.KEYS_MAX
    before = (ApiKey.objects.count(), AuditEntry.objects.count())
    refused = api.post(KEYS, {"name": "one more"}, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        "code": "invalid_request",
        "message": "A project has at most 100 API keys in use; revoke one first.",
    }
    with pytest.raises(CommandError, match="at most 100 API keys in use") as info:
        apikey("create", "--project", "acme")
    assert info.value.returncode == cli.EXIT_INVALID
    assert (ApiKey.objects.count(), AuditEntry.objects.count()) == before
    # With a grace period both keys work until it ends: refused at the cap like a create.
    graced = api.post(
        f"{KEYS}/{key_of(keys.read_only).pk}/rotate", {"graceSeconds": 60}, format="json"
    )
    assert graced.status_code == 400
    assert graced.json()["error"] == {
        "code": "invalid_request",
        "message": "A project has at most 100 API keys in use; revoke one first, "
        "or rotate with no grace period.",
    }
    with pytest.raises(CommandError, match="or rotate with no grace period") as info:
        apikey("rotate", str(key_of(keys.read_only).pk), "--grace", "60")
    assert info.value.returncode == cli.EXIT_INVALID
    assert (ApiKey.objects.count(), AuditEntry.objects.count()) == before
    assert key_of(keys.read_only).revoked_at is None
    # Rotating a key at the cap with no grace period works: its old key ends now.
    rotated = api.post(f"{KEYS}/{key_of(keys.read_only).pk}/rotate", {}, format="json")
    assert rotated.status_code == 201
    assert works(client_for, rotated.json()["secret"]) == 200
    # Once a key is revoked, one more may be made; another project's keys never counted.
    assert api.post(f"{KEYS}/mak_k0000000/revoke").status_code == 200
    assert api.post(KEYS, {"name": "one more"}, format="json").status_code == 201
    assert api.post(KEYS, {"name": "and another"}, format="json").status_code == 400
    other = client_for(keys.other).post(
        "/api/managed-agents/projects/globex/api-keys", {}, format="json"
    )
    assert other.status_code == 201, other.json()


def test_the_list_is_paged_newest_first_revoked_keys_included(keys: Keys, api: APIClient) -> None:
    ApiKey.objects.bulk_create(
        ApiKey(
            project_id="acme", prefix=f"mak_old{i:05d}", hashed=f"old{i}", revoked_at=timezone.now()
        )
        for i in range(50)
    )
    made = list(
        ApiKey.objects.filter(project_id="acme")
        .order_by("-created_at", "id")
        .values_list("prefix", flat=True)
    )
    assert len(made) == 52
    first = api.get(KEYS).json()
    assert [key["prefix"] for key in first["apiKeys"]] == made[:50]
    rest = api.get(KEYS, {"cursor": first["nextCursor"]}).json()
    assert ([key["prefix"] for key in rest["apiKeys"]], rest["nextCursor"]) == (made[50:], None)
    assert api.get(KEYS, {"cursor": "nonsense"}).status_code == 400
