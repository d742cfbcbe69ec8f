"""API key authentication through the `x-api-key` header."""

from __future__ import annotations

from typing import Any

from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from memoryadmin.core.environments import Environment
from memoryadmin.memory.models import ApiKey
from memoryadmin.memory.services.keys import api_key_authenticate, api_key_authenticate_at

ENVIRONMENTS = frozenset(Environment.values)  # a property that builds a list on each use


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
        raw = request._request.META.get("HTTP_X_API_KEY")
        if raw is None:
            return None
        # A route to one memory resource (`p`, `r` and a valid environment)
        # resolves the resource with the key, in the same round trip; the
        # view decides whether the key may reach it.
        kwargs = (request.parser_context or {}).get("kwargs") or {}
        project_id, resource_id = kwargs.get("p"), kwargs.get("r")
        # Only a single valid environment: anything else is the view's to refuse.
        environments = request._request.GET.getlist("environment")
        environment = environments[0] if len(environments) == 1 else None
        view = (request.parser_context or {}).get("view")
        session_id = kwargs.get("session_id")
        reads_session = getattr(view, "reads_session_with_key", "")
        if session_id and reads_session:
            # A recall reads its session, bindings and documents with the key, a tool
            # call its session and bindings (one round trip on PostgreSQL); the view
            # decides whether the key reaches it.
            from memoryadmin.agents.services.sessions import api_key_authenticate_with_session

            key, session_lookup = api_key_authenticate_with_session(
                raw=raw.strip(), session_id=session_id, with_documents=reads_session == "documents"
            )
            request.session_lookup = session_lookup  # type: ignore[attr-defined]
        elif project_id and resource_id and environment in ENVIRONMENTS:
            # A document read (GET) reads the document with them too.
            doc_id = kwargs.get("doc_id")
            reads_document = request._request.method == "GET" and getattr(
                view, "reads_document_with_key", False
            )
            key, lookup = api_key_authenticate_at(
                raw=raw.strip(),
                project_id=project_id,
                environment=environment,
                resource_id=resource_id,
                doc_id=doc_id if reads_document and isinstance(doc_id, str) else None,
            )
            # Read by ApiView.resource.
            request.resource_lookup = lookup  # type: ignore[attr-defined]
        else:
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
