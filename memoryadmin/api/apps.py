from __future__ import annotations

from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "memoryadmin.api"
    label = "api"
    verbose_name = "Management API"
    # The OpenAPI extension (memoryadmin.api.schema) registers with the URLconf
    # (memoryadmin.api.urls), which every schema generation loads: commands that
    # never serve the API do not import drf-spectacular.
