"""The page of a provider resource (http and external providers): its records live with
the provider, so the page shows how it is reached, its tools, and who declares it."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponseBase

from memoryadmin.agents.services.operations import operations_unsettled
from memoryadmin.memory.models import Resource
from memoryadmin.memory.providers import manages_records, provider_for
from memoryadmin.memory.services.deployments import declarations_public, declared_resource_ids
from memoryadmin.web.views.base import Page, page_render


def provider_resource(request: HttpRequest, page: Page, resource: Resource) -> HttpResponseBase:
    # As deployments show it: header names and secret names, never a header's value.
    provider = declarations_public(
        [{"id": resource.resource_id, "provider": {"kind": resource.kind, **resource.config}}]
    )[0]["provider"]
    connection = (
        provider.get("connection") if isinstance(provider.get("connection"), dict) else None
    )
    context = {
        "resource": resource,
        # Writes still unsettled at the provider, and dead letters.
        "operations": operations_unsettled(
            project=page.project, environment=page.environment, resource_id=resource.resource_id
        ),
        "provider": provider,
        "connection": connection,
        # Declared (http) or built into the kind (external providers).
        "tools": provider_for(resource.kind).declared_tools(resource),
        "manages_records": manages_records(resource),
        "declared": resource.resource_id
        in declared_resource_ids(project=page.project, environment=page.environment),
        "other_settings": {
            key: value
            for key, value in provider.items()
            if key not in ("kind", "maxBytes", "connection", "tools")
            and not (key == "path" and connection is not None)
        },
    }
    return page_render(request, "memoryadmin/provider_resource.html", page, context)
