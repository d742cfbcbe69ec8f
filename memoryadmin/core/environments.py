"""The two environments of a project: the one vocabulary every door and table uses."""

from __future__ import annotations

from django.db import models

from memoryadmin.core.errors import InvalidRequest


class Environment(models.TextChoices):
    DEVELOPMENT = "development"
    PRODUCTION = "production"


DEFAULT_ENVIRONMENT = Environment.DEVELOPMENT


# The names, as an error tells them.
_ALLOWED = " or ".join(f"'{name}'" for name in Environment.values)


def check_environment(value: object) -> Environment:
    """An environment name, or `invalid_request` naming the allowed ones."""
    if not isinstance(value, str) or value not in Environment.values:
        raise InvalidRequest(f"environment must be {_ALLOWED}.")
    return Environment(value)
