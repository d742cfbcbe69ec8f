from __future__ import annotations

from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "memoryadmin.demo"
    label = "demo"
    verbose_name = "Demo project"
