"""The environments: one enum, and every door that names them agrees with it."""

from __future__ import annotations

from typing import get_args

import pytest
from django.urls import NoReverseMatch, reverse

import memoryadmin_client as client
from memoryadmin.core.environments import DEFAULT_ENVIRONMENT, Environment, check_environment
from memoryadmin.core.errors import InvalidRequest


def test_there_are_two_environments_and_development_is_the_default() -> None:
    assert Environment.values == ["development", "production"]
    assert DEFAULT_ENVIRONMENT == Environment.DEVELOPMENT


def test_the_sdk_names_the_same_environments() -> None:
    # The SDK imports no Django, so it spells the names out; they must not drift.
    assert list(get_args(client.Environment)) == Environment.values


@pytest.mark.parametrize("name", ["development", "production"])
def test_check_environment_returns_the_member(name: str) -> None:
    parsed = check_environment(name)
    assert parsed is Environment(name)
    assert parsed == name


@pytest.mark.parametrize("value", [None, "", "Production", "staging", ["development"], 1])
def test_check_environment_rejects_anything_else(value: object) -> None:
    with pytest.raises(InvalidRequest) as raised:
        check_environment(value)
    assert raised.value.message == "environment must be 'development' or 'production'."


def test_web_urls_take_exactly_the_environments() -> None:
    for environment in Environment:
        url = reverse("web:inventory", args=["acme", environment])
        assert url.endswith(f"/acme/{environment.value}/")
    with pytest.raises(NoReverseMatch):
        reverse("web:inventory", args=["acme", "staging"])
