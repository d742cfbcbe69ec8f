from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings


class WebhooksConfig(AppConfig):
    name = "memoryadmin.webhooks"
    label = "webhooks"
    verbose_name = "Webhooks"

    def ready(self) -> None:
        from memoryadmin.memory.services.audit import audit_listener_register
        from memoryadmin.runner.housekeeping import records_register
        from memoryadmin.webhooks.delivery import deliveries_past_keeping
        from memoryadmin.webhooks.models import Delivery
        from memoryadmin.webhooks.outbox import Outbox

        # Every audited change writes its deliveries in its own transaction.
        audit_listener_register(Outbox())
        # Finished deliveries past their days go, their jobs with them.
        records_register(
            "webhook deliveries",
            Delivery,
            deliveries_past_keeping,
            days=lambda: settings.MEMORYADMIN_WEBHOOK_DELIVERIES_KEEP_DAYS,
        )
