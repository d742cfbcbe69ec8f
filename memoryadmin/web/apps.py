from __future__ import annotations

from django.apps import AppConfig


class WebConfig(AppConfig):
    name = "memoryadmin.web"
    label = "web"
    verbose_name = "Memory page"
