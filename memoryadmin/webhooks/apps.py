from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings


class WebhooksConfig(AppConfig):
    name = "memoryadmin.webhooks"
    label = "webhooks"
    verbose_name = "Webhooks"

    def ready(self) -> None:
        from memoryadmin.core.erasing import copies_register
        from memoryadmin.memory.services.audit import audit_listener_register
        from memoryadmin.runner.housekeeping import records_register
        from memoryadmin.webhooks.delivery import deliveries_past_keeping
        from memoryadmin.webhooks.models import Delivery
        from memoryadmin.webhooks.outbox import Outbox
        from memoryadmin.webhooks.services import deliveries_erase

        # Every audited change writes its deliveries in its own transaction.
        audit_listener_register(Outbox())
        # Payloads go with an erasure of a text they hold. A payload names a version (its
        # ids and revision: `event_data`) but never holds its text: nothing to redact.
        copies_register("webhooks", erase=deliveries_erase, redact=None)
        # Finished deliveries past their days go, their jobs with them.
        records_register(
            "webhook deliveries",
            Delivery,
            deliveries_past_keeping,
            days=lambda: settings.MEMORYADMIN_WEBHOOK_DELIVERIES_KEEP_DAYS,
        )
