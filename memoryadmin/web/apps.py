from __future__ import annotations

from django.apps import AppConfig


class WebConfig(AppConfig):
    name = "memoryadmin.web"
    label = "web"
    verbose_name = "Memory page"

    def ready(self) -> None:
        from memoryadmin.erasures.services import erasure_place_register
        from memoryadmin.incidents.services.incidents import incidents_erase
        from memoryadmin.web.services.imports import pending_erase

        # An upload waiting for its import is an export kept on the server.
        erasure_place_register("exports", pending_erase)
        # Incidents and erasures are apps beside each other: neither imports the other.
        erasure_place_register("incidents", incidents_erase)
