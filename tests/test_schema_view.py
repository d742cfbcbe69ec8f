"""`/api/schema/` serves what drf-spectacular's own view serves, built once per process."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client, RequestFactory
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.views import SpectacularAPIView

from memoryadmin.api.schema import _schema_forgotten

ASKED: list[tuple[str, dict[str, Any]]] = [
    ("", {}),  # YAML, drf-spectacular's first format
    ("format=json", {}),
    ("", {"HTTP_ACCEPT": "application/json"}),
    ("", {"HTTP_ACCEPT": "application/vnd.oai.openapi+json; indent=2"}),
    ("", {"HTTP_ACCEPT": "application/yaml"}),
]


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times a schema is built from now on (the cache of earlier tests forgotten)."""
    _schema_forgotten()
    built: list[int] = []
    real = SchemaGenerator.get_schema

    def counted(self: SchemaGenerator, *args: Any, **kwargs: Any) -> Any:
        built.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counted)
    return built


def _theirs(query: str, headers: dict[str, Any]) -> Any:
    request = RequestFactory().get(f"/api/schema/?{query}", **headers)
    response = SpectacularAPIView.as_view()(request)
    response.render()
    return response


def test_each_format_is_drf_spectacular_s_own_answer_and_the_schema_is_built_once(
    client: Client, builds: list[int]
) -> None:
    ours = [client.get(f"/api/schema/?{query}", **headers) for query, headers in ASKED * 2]
    assert len(builds) == 1

    for (query, headers), answer in zip(ASKED * 2, ours, strict=True):
        theirs = _theirs(query, headers)
        assert answer.status_code == theirs.status_code == 200
        assert answer.content == theirs.content, (query, headers)
        assert answer["Content-Type"] == theirs["Content-Type"]
        assert answer["Content-Disposition"] == theirs["Content-Disposition"]
    assert ours[0]["Content-Type"] == "application/vnd.oai.openapi; charset=utf-8"
    assert ours[1].json()["info"]["title"] == "memoryadmin management API"
    assert ours[3].content.startswith(b'{\n  "openapi"')  # the indent asked


def test_a_version_parameter_names_no_schema_of_its_own(client: Client, builds: list[int]) -> None:
    plain = client.get("/api/schema/?format=json")
    for version in ["2", "x" * 200, "3.1"]:
        answer = client.get(f"/api/schema/?format=json&version={version}")
        assert answer.status_code == 200
        assert answer.content == plain.content
    assert len(builds) == 1


def test_a_changed_setting_builds_the_schema_again(
    client: Client, builds: list[int], settings: Any
) -> None:
    client.get("/api/schema/?format=json")
    client.get("/api/schema/?format=json")
    assert len(builds) == 1
    settings.MEMORYADMIN_API_RATE = "5/second"  # any setting: the schema may follow it
    again = client.get("/api/schema/?format=json")
    assert len(builds) == 2
    assert again.content == _theirs("format=json", {}).content


def test_every_operation_with_a_key_lists_its_rate_limits_429(client: Client) -> None:
    """Every request with a key counts in its key's and project's windows: a 429 can
    answer any of them, and a client reading the schema must know it."""
    schema = client.get("/api/schema/?format=json").json()
    missing = [
        f"{method.upper()} {path}"
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if isinstance(operation, dict)
        and any(operation.get("security", []))  # a scheme named: a key is sent
        and "429" not in operation.get("responses", {})
    ]
    assert not missing, missing
