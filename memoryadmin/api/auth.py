"""API key authentication through the `x-api-key` header."""

from __future__ import annotations

from typing import Any

from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from memoryadmin.memory.models import ApiKey
from memoryadmin.memory.services.keys import api_key_authenticate


class KeyHolder:
    """Stands in for `request.user` on API requests."""

    is_authenticated = True
    is_anonymous = False

    def __init__(self, key: ApiKey) -> None:
        self.key = key

    def __str__(self) -> str:
        return f"key:{self.key.prefix}"


class ApiKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[KeyHolder, ApiKey] | None:
        raw = request.META.get("HTTP_X_API_KEY")
        if raw is None:
            return None
        key = api_key_authenticate(raw=raw.strip())
        if key is None:
            raise AuthenticationFailed("The API key is not valid.")
        return KeyHolder(key), key

    def authenticate_header(self, request: Request) -> str:
        # A value here makes DRF answer 401 rather than 403 for a missing key.
        return "x-api-key"


class HasApiKey(BasePermission):
    message = "An API key is required in the x-api-key header."

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, ApiKey)
