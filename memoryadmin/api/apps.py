from __future__ import annotations

from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "memoryadmin.api"
    label = "api"
    verbose_name = "Management API"

    def ready(self) -> None:
        from memoryadmin.api import schema  # noqa: F401  (registers the auth extension)
