from __future__ import annotations

from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memoryadmin.memory"
    label = "memory"
    verbose_name = "Memory"
