"""OpenAPI description of the x-api-key authentication, and the areas (tags) the API
reference groups its operations under."""

from __future__ import annotations

from typing import Any

from drf_spectacular.drainage import warn
from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "memoryadmin.api.auth.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "apiKey", "in": "header", "name": "x-api-key"}


PREFIX = "/api/managed-agents/"

# Each area (its tag, in the reference's order, and what it holds) and the first path
# segment (after `projects/{p}/`, `memory/` and `{r}/`) of the routes it holds.
AREAS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Projects", "The projects this key may reach.", ("",)),
    ("Deployments", "Deployments and their promotion between environments.", ("deployments",)),
    (
        "Documents",
        "Memory resources, their documents, versions, readers, redaction and restores.",
        ("memory", "documents", "restore"),
    ),
    ("Search", "Search across a project's documents.", ("search",)),
    ("Records", "Records kept by an external memory provider.", ("records",)),
    ("Sessions", "Agent sessions: their bindings, events, recalls and revert.", ("sessions",)),
    ("Recall & tools", "What a running session calls: recall, tool calls, cancel.", ("runtime",)),
    ("Proposals", "Agent saves waiting for an owner's review.", ("proposals",)),
    ("Operations", "Provider operations: their state, retry and discard.", ("operations",)),
    (
        "Exports & imports",
        "A project's memory as one export, and its import.",
        ("export", "import"),
    ),
    (
        "Erasures",
        "Erasures of a subject's data and their signed receipts.",
        ("erasures", "erasure-key"),
    ),
    ("Incidents", "Memory incidents and their containment.", ("incidents",)),
    ("Audit", "The project's audit log.", ("audit",)),
    ("Keys", "API keys: creation, rotation and revocation.", ("api-keys",)),
    ("Secrets", "Provider secrets (write-only).", ("secrets",)),
    ("Webhooks", "Webhooks, their deliveries, tests and secret rotation.", ("webhooks",)),
)
AREA_OF_SEGMENT = {segment: tag for tag, _, segments in AREAS for segment in segments}


def area_of(path: str) -> str | None:
    """The tag of the route at `path` (as the schema spells it), or None if no area holds it."""
    segments = [s for s in path.removeprefix(PREFIX).split("/") if not s.startswith("{")]
    if segments[0] == "sessions":
        return AREA_OF_SEGMENT["runtime" if "memory" in segments else "sessions"]
    if segments[0] == "projects":
        segments = segments[1:] or [""]
        if segments[0] == "memory" and len(segments) > 1:
            segments = segments[1:]
    return AREA_OF_SEGMENT.get(segments[0])


def tag_by_area(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Postprocessing hook: every operation under its area's tag, the areas described in
    the reference's order. A route no area holds is a warning (`make schema` fails)."""
    for path, operations in result["paths"].items():
        tag = area_of(path)
        if tag is None:
            warn(f"{path} belongs to no area of the API reference: add it to AREAS")
            continue
        for operation in operations.values():
            operation["tags"] = [tag]
    result["tags"] = [{"name": tag, "description": text} for tag, text, _ in AREAS]
    return result
