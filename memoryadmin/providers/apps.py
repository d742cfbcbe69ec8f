from __future__ import annotations

from django.apps import AppConfig


class ProvidersConfig(AppConfig):
    name = "memoryadmin.providers"
    label = "providers"
    verbose_name = "HTTP memory providers"

    def ready(self) -> None:
        from memoryadmin.memory.providers import provider_register
        from memoryadmin.providers.http import HttpProvider

        # Deployments may declare `{"kind": "http", ...}` once this app is installed.
        provider_register(HttpProvider())
