from __future__ import annotations

from django.apps import AppConfig


class RunnerConfig(AppConfig):
    name = "memoryadmin.runner"
    label = "runner"
    verbose_name = "Background jobs"
