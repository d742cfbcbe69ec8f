from __future__ import annotations

from django.apps import AppConfig


class IncidentsConfig(AppConfig):
    name = "memoryadmin.incidents"
    label = "incidents"
    verbose_name = "Memory incidents"

    def ready(self) -> None:
        from memoryadmin.agents.services.operations import operations_named_register
        from memoryadmin.incidents.models import NamedOperation

        # The operations its kept containment report names stay while it names them.
        operations_named_register(NamedOperation, "operation_id")
