from __future__ import annotations

from django.apps import AppConfig


class IncidentsConfig(AppConfig):
    name = "memoryadmin.incidents"
    label = "incidents"
    verbose_name = "Memory incidents"

    def ready(self) -> None:
        from memoryadmin.agents.services.operations import (
            operations_named_register,
            operations_settled_register,
        )
        from memoryadmin.core.erasing import copies_register
        from memoryadmin.incidents.models import NamedOperation
        from memoryadmin.incidents.services.contain import pending_settled
        from memoryadmin.incidents.services.incidents import incidents_erase, incidents_redact

        # The operations its kept containment report names stay while it names them.
        operations_named_register(NamedOperation, "operation_id")
        # A write its containment left pending is contained once its operation settles.
        operations_settled_register(pending_settled)

        # An incident's title, source and reports go with an erasure of a text they hold;
        # its containment's merges with a redaction of a version they were made from.
        copies_register("incidents", erase=incidents_erase, redact=incidents_redact)
