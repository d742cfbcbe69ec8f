from __future__ import annotations

from django.apps import AppConfig


class ExternalConfig(AppConfig):
    name = "memoryadmin.external"
    label = "external"
    verbose_name = "External memory providers"

    def ready(self) -> None:
        from memoryadmin.external.hindsight import HindsightProvider
        from memoryadmin.external.mem0_oss import Mem0OssProvider
        from memoryadmin.external.mem0_platform import Mem0PlatformProvider
        from memoryadmin.external.vertex import VertexMemoryBankProvider
        from memoryadmin.memory.providers import provider_register

        # Deployments may declare these kinds once this app is installed.
        for provider in (
            Mem0OssProvider(),
            Mem0PlatformProvider(),
            VertexMemoryBankProvider(),
            HindsightProvider(),
        ):
            provider_register(provider)
