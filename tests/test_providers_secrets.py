"""Managed secrets: set through the API or the CLI, listed by name only, never echoed."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from memoryadmin.memory.models import AuditEntry, Project
from memoryadmin.providers.models import Secret
from memoryadmin.providers.services.secrets import secret_resolve, secret_set
from tests.helpers import DEV, Keys

SECRETS = "/api/managed-agents/projects/acme/secrets"
VALUE = "tok_s3cr3t-value-that-must-never-leak"
ORIGIN = "https://memory.example.com"


def put_secret(client: APIClient, name: str, body: Any, query: str = DEV) -> Any:
    return client.put(
        f"{SECRETS}/{name}{query}", data=json.dumps(body), content_type="application/json"
    )


def store(project: Project, name: str, value: str, environment: str = "development") -> None:
    secret_set(
        project=project,
        environment=environment,
        name=name,
        value=value,
        origins=[ORIGIN],
        actor="t",
    )


def stored(name: str = "MEMORY_TOKEN", environment: str = "development") -> str | None:
    row = Secret.objects.filter(project_id="acme", environment=environment, name=name).first()
    return row.value if row else None


def test_put_stores_the_value_and_answers_204_without_it(api: APIClient) -> None:
    response = put_secret(api, "MEMORY_TOKEN", {"value": VALUE, "origins": [ORIGIN]})
    assert response.status_code == 204
    assert response.content == b""
    assert stored() == VALUE
    assert stored(environment="production") is None
    entry = AuditEntry.objects.get(action="secret.set")
    assert entry.detail == {"name": "MEMORY_TOKEN", "created": True, "origins": [ORIGIN]}
    assert VALUE not in json.dumps(entry.detail)


def test_put_again_replaces_the_value(api: APIClient) -> None:
    put_secret(api, "MEMORY_TOKEN", {"value": "first", "origins": [ORIGIN]})
    response = put_secret(api, "MEMORY_TOKEN", {"value": VALUE})
    assert response.status_code == 204
    assert stored() == VALUE
    assert Secret.objects.count() == 1


def test_list_returns_names_and_times_only(api: APIClient, project: Project) -> None:
    store(project, "B_TOKEN", VALUE)
    store(project, "A_TOKEN", VALUE)
    store(project, "PROD", VALUE, environment="production")
    response = api.get(f"{SECRETS}{DEV}")
    assert response.status_code == 200
    body = response.json()
    assert [s["name"] for s in body["secrets"]] == ["A_TOKEN", "B_TOKEN"]
    assert set(body["secrets"][0]) == {"name", "origins", "updatedAt"}
    assert body["secrets"][0]["origins"] == [ORIGIN]
    assert VALUE not in response.content.decode()


def test_get_of_one_secret_is_405(api: APIClient, project: Project) -> None:
    store(project, "T", VALUE)
    response = api.get(f"{SECRETS}/T{DEV}")
    assert response.status_code == 405
    assert VALUE not in response.content.decode()


def test_delete_removes_the_secret(api: APIClient, project: Project) -> None:
    store(project, "T", VALUE)
    response = api.delete(f"{SECRETS}/T{DEV}")
    assert response.status_code == 204
    assert not Secret.objects.exists()
    assert AuditEntry.objects.filter(action="secret.delete").count() == 1
    again = api.delete(f"{SECRETS}/T{DEV}")
    assert again.status_code == 404
    assert again.json()["error"]["code"] == "secret_not_found"


@pytest.mark.parametrize(
    ("name", "body", "query"),
    [
        ("MEMORY_TOKEN", {"value": VALUE, "origins": [ORIGIN]}, ""),
        ("MEMORY_TOKEN", {"value": VALUE}, "?environment=staging"),
        ("9TOKEN", {"value": VALUE, "origins": [ORIGIN]}, DEV),
        ("MEMORY-TOKEN", {"value": VALUE, "origins": [ORIGIN]}, DEV),
        ("MEMORY_TOKEN", {"value": VALUE}, DEV),
        ("MEMORY_TOKEN", {"value": VALUE, "origins": []}, DEV),
        ("MEMORY_TOKEN", {"value": VALUE, "origins": "https://memory.example.com"}, DEV),
        ("MEMORY_TOKEN", {"value": VALUE, "origins": ["http://memory.example.com"]}, DEV),
        ("MEMORY_TOKEN", {"value": VALUE, "origins": ["https://memory.example.com/api"]}, DEV),
        ("MEMORY_TOKEN", {"value": VALUE, "origins": ["https://10.0.0.1"]}, DEV),
        ("REFERENCE_PROVIDER_TOKEN", {"value": VALUE, "origins": [ORIGIN]}, DEV),
        ("MEMORY_TOKEN", {"value": ""}, DEV),
        ("MEMORY_TOKEN", {"value": VALUE + "\n"}, DEV),
        ("MEMORY_TOKEN", {"value": VALUE + "é"}, DEV),
        ("MEMORY_TOKEN", {"value": VALUE * 200}, DEV),
        ("MEMORY_TOKEN", {"value": 12345}, DEV),
        ("MEMORY_TOKEN", {"value": VALUE, "note": "x"}, DEV),
        ("MEMORY_TOKEN", {}, DEV),
    ],
)
def test_invalid_put_is_400_and_never_echoes_the_value(
    api: APIClient, name: str, body: Any, query: str
) -> None:
    response = put_secret(api, name, body, query)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert VALUE not in response.content.decode()
    assert not Secret.objects.exists()


# Access: (method, path, body, success status).
ENDPOINTS = [
    ("get", f"{SECRETS}{DEV}", None, 200),
    ("put", f"{SECRETS}/T{DEV}", {"value": VALUE, "origins": [ORIGIN]}, 204),
    ("delete", f"{SECRETS}/T{DEV}", None, 204),
]


def call(client: APIClient, method: str, path: str, body: Any) -> Any:
    if body is None:
        return getattr(client, method)(path)
    return getattr(client, method)(path, data=json.dumps(body), content_type="application/json")


@pytest.fixture
def seeded(project: Project, keys: Keys) -> Keys:
    store(project, "T", "before")
    return keys


@pytest.mark.parametrize(("method", "path", "body", "ok"), ENDPOINTS)
@pytest.mark.parametrize("who", ["owner", "all_projects"])
def test_keys_of_the_project_succeed(
    client_for: Callable[[str | None], APIClient],
    seeded: Keys,
    who: str,
    method: str,
    path: str,
    body: Any,
    ok: int,
) -> None:
    response = call(client_for(getattr(seeded, who)), method, path, body)
    assert response.status_code == ok
    assert VALUE not in response.content.decode()


REFUSED = [
    (who, status, endpoint)
    for who, status in [(None, 401), ("bad", 401), ("other", 403), ("read_only", 403)]
    for endpoint in ENDPOINTS
    # A read-only key may list names; it may not set or delete.
    if not (who == "read_only" and endpoint[0] == "get")
]


@pytest.mark.parametrize(("who", "status", "endpoint"), REFUSED)
def test_refused_keys_change_nothing(
    client_for: Callable[[str | None], APIClient],
    seeded: Keys,
    who: str | None,
    status: int,
    endpoint: tuple[str, str, Any, int],
) -> None:
    method, path, body, _ = endpoint
    key = "mak_not-a-key" if who == "bad" else getattr(seeded, who) if who else None
    response = call(client_for(key), method, path, body)
    assert response.status_code == status
    assert response.json()["error"]["code"] == ("unauthorized" if status == 401 else "forbidden")
    assert stored("T") == "before"
    assert Secret.objects.count() == 1


def test_read_only_key_lists_names(
    client_for: Callable[[str | None], APIClient], seeded: Keys
) -> None:
    response = client_for(seeded.read_only).get(f"{SECRETS}{DEV}")
    assert response.status_code == 200
    assert response.json()["secrets"][0]["name"] == "T"
    assert "before" not in response.content.decode()


def test_unknown_project_is_404_for_all_projects_key(
    client_for: Callable[[str | None], APIClient], keys: Keys
) -> None:
    response = client_for(keys.all_projects).get(f"/api/managed-agents/projects/nope/secrets{DEV}")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "project_not_found"


# The CLI.


def run(*args: str, stdin: str = "") -> str:
    out = io.StringIO()
    call_command("secret", *args, stdin=io.StringIO(stdin), stdout=out)
    return out.getvalue()


def test_cli_set_reads_the_value_from_stdin(project: Project) -> None:
    output = run(
        "set", "--project", "acme", "--environment", "production", "MEMORY_TOKEN",
        "--origin", ORIGIN, "--origin", "https://backup.example.com:8443/",
        stdin=VALUE + "\n",
    )  # fmt: skip
    assert "Created secret MEMORY_TOKEN" in output
    assert VALUE not in output
    assert stored(environment="production") == VALUE
    assert secret_resolve(project_id="acme", environment="production", name="MEMORY_TOKEN") == (
        VALUE
    )
    assert AuditEntry.objects.get(action="secret.set").actor.startswith("cli:")
    assert Secret.objects.get().origins == ["https://backup.example.com:8443", ORIGIN]


def test_cli_list_and_delete(project: Project) -> None:
    store(project, "T", VALUE)
    listed = run("list", "--project", "acme", "--environment", "development")
    assert listed.startswith(f"T\t{ORIGIN}\t")
    assert VALUE not in listed
    deleted = run("delete", "--project", "acme", "--environment", "development", "T")
    assert "Deleted secret T" in deleted
    assert not Secret.objects.exists()


def test_cli_rejects_a_bad_value_without_echoing_it(project: Project) -> None:
    with pytest.raises(CommandError) as raised:
        run(
            "set", "--project", "acme", "--environment", "development", "T",
            "--origin", ORIGIN, stdin="a\nb\n",
        )  # fmt: skip
    assert "printable ASCII" in str(raised.value)
    assert "a\nb" not in str(raised.value)
    assert not Secret.objects.exists()


def test_cli_unknown_project_is_an_error(db: None) -> None:
    with pytest.raises(CommandError) as raised:
        run("list", "--project", "nope", "--environment", "development")
    assert raised.value.returncode == 3


def test_a_project_has_at_most_secrets_max_secrets_in_an_environment(
    api: APIClient, project: Project
) -> None:
    Secret.objects.bulk_create(
        Secret(project=project, environment="development", name=f"S{i}", value="v", origins=[])
        for i in range(100)
    )
    before = (Secret.objects.count(), AuditEntry.objects.count())
    refused = put_secret(api, "ONE_MORE", {"value": VALUE, "origins": [ORIGIN]})
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        "code": "invalid_request",
        "message": "A project has at most 100 secrets in development; delete one first.",
    }
    with pytest.raises(CommandError, match="at most 100 secrets in development"):
        call_command(
            "secret", "set", "--project", "acme", "ONE_MORE", "--origin", ORIGIN,
            stdin=io.StringIO(VALUE),
        )  # fmt: skip
    assert (Secret.objects.count(), AuditEntry.objects.count()) == before
    # Replacing one is never refused; another environment has its own count.
    assert put_secret(api, "S7", {"value": VALUE, "origins": [ORIGIN]}).status_code == 204
    assert secret_resolve(project_id="acme", environment="development", name="S7") == VALUE
    prod = put_secret(
        api, "ONE_MORE", {"value": VALUE, "origins": [ORIGIN]}, "?environment=production"
    )
    assert prod.status_code == 204
    assert api.delete(f"{SECRETS}/S0{DEV}").status_code == 204
    assert put_secret(api, "ONE_MORE", {"value": VALUE, "origins": [ORIGIN]}).status_code == 204


def test_a_secret_set_to_the_value_and_origins_it_has_writes_nothing(
    api: APIClient, project: Project
) -> None:
    """Setting a secret as it is answers as before (204, no body) and writes nothing: no
    audit entry, the row as it was; another value or other origins are a change."""
    body = {"value": VALUE, "origins": [ORIGIN]}
    assert put_secret(api, "MEMORY_TOKEN", body).status_code == 204
    row = Secret.objects.get(name="MEMORY_TOKEN")
    entries = AuditEntry.objects.count()
    for again in (body, {"value": VALUE}):  # without origins: the ones it has
        response = put_secret(api, "MEMORY_TOKEN", again)
        assert response.status_code == 204
        assert response.content == b""
    out = io.StringIO()
    call_command(
        "secret", "set", "--project", "acme", "MEMORY_TOKEN",
        stdin=io.StringIO(VALUE + "\n"), stdout=out,
    )  # fmt: skip
    assert out.getvalue() == "Replaced secret MEMORY_TOKEN in acme/development.\n"
    assert AuditEntry.objects.count() == entries
    kept = Secret.objects.get(name="MEMORY_TOKEN")
    assert (kept.value, kept.origins, kept.updated_at) == (VALUE, [ORIGIN], row.updated_at)
    other = "https://other.example.com"
    assert put_secret(api, "MEMORY_TOKEN", {"value": VALUE, "origins": [other]}).status_code == 204
    assert put_secret(api, "MEMORY_TOKEN", {"value": VALUE + "2"}).status_code == 204
    audited = AuditEntry.objects.filter(action="secret.set").order_by("id")
    assert [e.detail for e in audited][-2:] == [
        {"name": "MEMORY_TOKEN", "created": False, "origins": [other]},
        {"name": "MEMORY_TOKEN", "created": False, "origins": [other]},
    ]
    assert AuditEntry.objects.count() == entries + 2
    assert stored() == VALUE + "2"
