from __future__ import annotations

from django.apps import AppConfig


class ProvidersConfig(AppConfig):
    name = "memoryadmin.providers"
    label = "providers"
    verbose_name = "HTTP memory providers"

    def ready(self) -> None:
        from memoryadmin.memory.services.deployments import (
            PROMOTE_CHECKS,
            PROVIDER_VIEWS,
            PROVIDERS,
        )
        from memoryadmin.providers.declarations import (
            http_provider_normalize,
            http_provider_public,
        )
        from memoryadmin.providers.services.secrets import secret_bindings_check

        # Deployments may declare `{"kind": "http", ...}` once this app is installed.
        PROVIDERS["http"] = http_provider_normalize
        PROMOTE_CHECKS["http"] = secret_bindings_check
        PROVIDER_VIEWS["http"] = http_provider_public
