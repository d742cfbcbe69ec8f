from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings


class AgentsConfig(AppConfig):
    name = "memoryadmin.agents"
    label = "agents"
    verbose_name = "Agent sessions"

    def ready(self) -> None:
        from memoryadmin.agents.bindings import sessions_tools_check
        from memoryadmin.agents.document_provider import DocumentProvider
        from memoryadmin.agents.models import ProviderOperation, Session
        from memoryadmin.agents.representations import reader_dict
        from memoryadmin.agents.services.operations import operations_past_keeping
        from memoryadmin.agents.services.provenance import version_readers
        from memoryadmin.agents.services.recalls import recalls_erase, recalls_redact
        from memoryadmin.core.erasing import copies_register
        from memoryadmin.memory.cli_history import readers_register
        from memoryadmin.memory.providers import provider_register
        from memoryadmin.memory.services.deployments import tools_changed_check_register
        from memoryadmin.memory.services.document_filters import agent_sessions_register
        from memoryadmin.runner.housekeeping import records_register

        provider_register(DocumentProvider())
        # A promotion that changes a resource's tools is refused where the sessions bound
        # to it would offer tools that collide, as their creation would have been.
        tools_changed_check_register(sessions_tools_check)
        # What recalls showed models goes with an erasure of its text and with a redaction
        # of its version; the CLI's history names the sessions that read a version.
        copies_register("agents", erase=recalls_erase, redact=recalls_redact)
        readers_register(
            lambda document, revision: [
                reader_dict(r) for r in version_readers(document=document, revision=revision)
            ]
        )
        # The document list's "agent" facet: the sessions an agent ran there.
        agent_sessions_register(
            lambda resource, agent: Session.objects.filter(
                project_id=resource.project_id, environment=resource.environment, agent=agent
            ).values("id")
        )
        # Settled operations past their days go, their jobs with them.
        records_register(
            "provider operations",
            ProviderOperation,
            operations_past_keeping,
            days=lambda: settings.MEMORYADMIN_OPERATIONS_KEEP_DAYS,
        )
