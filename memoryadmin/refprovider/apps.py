from __future__ import annotations

from django.apps import AppConfig


class RefProviderConfig(AppConfig):
    name = "memoryadmin.refprovider"
    label = "refprovider"
    verbose_name = "Reference memory provider"
