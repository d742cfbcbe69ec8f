from __future__ import annotations

from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "memoryadmin.agents"
    label = "agents"
    verbose_name = "Agent sessions"

    def ready(self) -> None:
        from memoryadmin.agents.document_provider import DocumentProvider
        from memoryadmin.memory.providers import provider_register

        provider_register(DocumentProvider())
