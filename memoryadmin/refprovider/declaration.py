"""How a deployment declares the reference provider, and the token it accepts."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils.crypto import salted_hmac

MOUNT = "/reference-provider"
ENDPOINT = f"{MOUNT}/oc-memory"
TOKEN_SECRET_NAME = "REFERENCE_PROVIDER_TOKEN"

REFERENCE_TOOLS: list[dict[str, Any]] = [
    {
        "name": "remember",
        "description": (
            "Save one verified fact for later sessions. Stored facts are available "
            "to the next recall; a conflict means memory changed since this request's "
            "recall, so reconcile with the next one."
        ),
        "access": "write",
        "idempotent": True,
        "input": {
            "type": "object",
            "properties": {
                "fact": {"type": "string", "minLength": 1, "maxLength": 2000},
                "title": {"type": "string", "maxLength": 200},
            },
            "required": ["fact"],
            "additionalProperties": False,
        },
    },
    {
        "name": "search",
        "description": "Find stored facts by words they contain, most relevant first.",
        "access": "read",
        "idempotent": False,
        "input": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": 500},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
    {
        "name": "forget",
        "description": (
            "Delete one stored fact by its source id (fact:<n>). The next recall no "
            "longer shows it; a conflict means memory changed since this request's recall."
        ),
        "access": "write",
        "idempotent": True,
        "input": {
            "type": "object",
            "properties": {"id": {"type": "string", "minLength": 1, "maxLength": 1024}},
            "required": ["id"],
            "additionalProperties": False,
        },
    },
]


def reference_token() -> str:
    """The bearer token the reference provider accepts.

    REFERENCE_PROVIDER_TOKEN in the environment wins; otherwise it is derived
    from SECRET_KEY, so it survives restarts without configuration.
    """
    configured = getattr(settings, "REFERENCE_PROVIDER_TOKEN", "")
    if configured:
        return str(configured)
    return (
        "rpt_" + salted_hmac("memoryadmin.refprovider.token", "v1", algorithm="sha256").hexdigest()
    )


def reference_declaration(
    *,
    resource_id: str,
    base_url: str,
    description: str,
    max_bytes: int = 4096,
    secret_name: str = TOKEN_SECRET_NAME,
) -> dict[str, Any]:
    """A memory declaration of an http resource served by the reference provider at base_url."""
    return {
        "id": resource_id,
        "description": description,
        "provider": {
            "kind": "http",
            "connection": {
                "id": "reference-provider",
                "origin": base_url.rstrip("/"),
                "methods": ["POST"],
                "pathPrefix": MOUNT,
                "headers": {"Authorization": {"secret": secret_name, "scheme": "Bearer"}},
            },
            "path": ENDPOINT,
            "maxBytes": max_bytes,
            "tools": REFERENCE_TOOLS,
        },
    }
