from __future__ import annotations

from django.conf import settings
from django.urls import include, path

from memoryadmin.api.schema import DocsView, SchemaView
from memoryadmin.errorpages import (
    bad_request_view,
    not_found_view,
    permission_denied_view,
    server_error_view,
)
from memoryadmin.health import healthz, readyz
from memoryadmin.metrics import metrics_view

urlpatterns = [
    path("api/managed-agents/", include("memoryadmin.api.urls")),
    path("reference-provider/", include("memoryadmin.refprovider.urls")),
    path("api/schema/", SchemaView.as_view(), name="schema"),
    # The split view serves its init script as a file (the CSP allows no inline script).
    path(
        "api/docs/",
        DocsView.as_view(url_name="schema", template_name="memoryadmin/api_reference.html"),
        name="api-docs",
    ),
    path("healthz", healthz, name="health"),
    path("readyz", readyz, name="ready"),
    path("metrics", metrics_view, name="metrics"),
    path("", include("memoryadmin.web.urls")),
]

if settings.MEMORYADMIN_BENCH_FLOORS:
    # `make bench` only: the floors its ratios are measured against.
    urlpatterns.insert(0, path("", include("memoryadmin.benchfloors")))

handler400 = bad_request_view
handler403 = permission_denied_view
handler404 = not_found_view
handler500 = server_error_view
