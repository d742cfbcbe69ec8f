from __future__ import annotations

from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "memoryadmin.webhooks"
    label = "webhooks"
    verbose_name = "Webhooks"

    def ready(self) -> None:
        from memoryadmin.memory.services.audit import audit_listener_register
        from memoryadmin.webhooks.outbox import Outbox

        # Every audited change writes its deliveries in its own transaction.
        audit_listener_register(Outbox())
