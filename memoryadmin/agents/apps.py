from __future__ import annotations

from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "memoryadmin.agents"
    label = "agents"
    verbose_name = "Agent sessions"
