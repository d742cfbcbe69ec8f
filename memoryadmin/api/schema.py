"""OpenAPI description of the x-api-key authentication, the areas (tags) the API
reference groups its operations under, and the views that serve the schema and its page."""

from __future__ import annotations

import threading
from typing import Any, ClassVar

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import HttpResponse
from drf_spectacular.drainage import warn
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SCHEMA_KWARGS, SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request


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


class SchemaView(SpectacularAPIView):
    """`GET /api/schema/`: drf-spectacular's view, with the schema built once per process
    and rendered once per format. The schema follows from the code and the settings
    alone (public: no operation is left out for the caller; one language; no API
    versions, so a `version` parameter names none), and building it costs about 55 ms of
    CPU and its YAML 30 to 80 ms more: built again for every request of this public
    route, a client could keep every worker busy with it. A format's bytes depend on its
    renderer and, for JSON, on the indent asked (0 to 8): a bounded set."""

    _built: ClassVar[dict[str, Any]] = {}
    # By renderer and indent: the body, and its Content-Disposition (named by the format).
    _rendered: ClassVar[dict[tuple[type[Any], int | None], tuple[bytes, str]]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def _get_version_parameter(self, request: Request) -> None:
        return None

    @extend_schema(**SCHEMA_KWARGS)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponse:
        renderer, media_type = request.accepted_renderer, request.accepted_media_type
        context = self.get_renderer_context()
        indent = (
            renderer.get_indent(media_type, context) if isinstance(renderer, JSONRenderer) else None
        )
        key = (type(renderer), indent)
        rendered = self._rendered.get(key)
        if rendered is None:
            with self._lock:
                if "schema" not in self._built:
                    self._built["schema"] = super().get(request, *args, **kwargs).data
                content = renderer.render(self._built["schema"], media_type, context)
                if isinstance(content, str):
                    content = content.encode(renderer.charset or "utf-8")
                disposition = f'inline; filename="{self._get_filename(request, None)}"'
                rendered = self._rendered.setdefault(key, (content, disposition))
        body, disposition = rendered
        charset = f"; charset={renderer.charset}" if renderer.charset else ""
        return HttpResponse(
            body,
            content_type=f"{renderer.media_type}{charset}",
            headers={"Content-Disposition": disposition},
        )


class DocsView(SpectacularSwaggerSplitView):
    """`GET /api/docs/`: the API reference page (drf-spectacular's, in the product's
    template). A page to read: any other method is 405 (DRF would answer `OPTIONS` with
    its metadata rendered through the page's template, which has none of its values)."""

    http_method_names = ["get", "head"]


@receiver(setting_changed)
def _schema_forgotten(**kwargs: Any) -> None:
    """A changed setting (tests) may change the schema: built again when next asked."""
    with SchemaView._lock:
        SchemaView._built.clear()
        SchemaView._rendered.clear()
