from __future__ import annotations

from django.apps import AppConfig


class IncidentsConfig(AppConfig):
    name = "memoryadmin.incidents"
    label = "incidents"
    verbose_name = "Memory incidents"
