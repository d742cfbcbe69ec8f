from __future__ import annotations

from django.apps import AppConfig


class ProvidersConfig(AppConfig):
    name = "memoryadmin.providers"
    label = "providers"
    verbose_name = "HTTP memory providers"

    def ready(self) -> None:
        from memoryadmin.memory.services.deployments import PROVIDERS
        from memoryadmin.providers.declarations import http_provider_normalize

        # Deployments may declare `{"kind": "http", ...}` once this app is installed.
        PROVIDERS["http"] = http_provider_normalize
