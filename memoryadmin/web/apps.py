from __future__ import annotations

from django.apps import AppConfig


class WebConfig(AppConfig):
    name = "memoryadmin.web"
    label = "web"
    verbose_name = "Memory page"

    def ready(self) -> None:
        from memoryadmin.core.erasing import copies_register
        from memoryadmin.web.services.imports import pending_erase, pending_redact

        # An upload waiting for its import is an export kept on the server.
        copies_register("exports", erase=pending_erase, redact=pending_redact)
