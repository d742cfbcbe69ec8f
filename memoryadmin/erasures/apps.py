from __future__ import annotations

from django.apps import AppConfig


class ErasuresConfig(AppConfig):
    name = "memoryadmin.erasures"
    label = "erasures"
    verbose_name = "Erasures"

    def ready(self) -> None:
        from memoryadmin.agents.services.operations import operations_named_register
        from memoryadmin.erasures.models import NamedOperation

        # The operations an erasure's receipt names stay as long as it does.
        operations_named_register(NamedOperation, "operation_id")
