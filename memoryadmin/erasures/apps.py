from __future__ import annotations

from django.apps import AppConfig


class ErasuresConfig(AppConfig):
    name = "memoryadmin.erasures"
    label = "erasures"
    verbose_name = "Erasures"
