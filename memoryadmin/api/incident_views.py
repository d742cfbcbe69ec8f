"""Memory incidents of a project's environment: open one (trace its source), list and read
them, contain one."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from memoryadmin.api import serializers as s
from memoryadmin.api.base import CURSOR, ENVIRONMENT, ERRORS, ApiView
from memoryadmin.incidents.models import Incident
from memoryadmin.incidents.services import contain as contain_services
from memoryadmin.incidents.services import incidents as incident_services


class IncidentInput(s.StrictSerializer):
    title = serializers.CharField(
        allow_blank=True, trim_whitespace=False, help_text="1-200 characters."
    )
    source = serializers.JSONField(  # type: ignore[assignment]
        help_text='Exactly one of {"session": id}, {"version": {"resource", "document", '
        '"revision"}}, {"apiKey": prefix}, {"text": exact text}.'
    )
    hops = serializers.JSONField(required=False, help_text="0-10; default 3.")


class ContainInput(s.StrictSerializer):
    dryRun = serializers.JSONField(required=False, help_text="true: report, write nothing.")
    actions = serializers.JSONField(
        required=False,
        help_text="Among freeze, endSessions, revert, revokeKey; default: all that apply.",
    )


NODE = inline_serializer(
    "IncidentNode",
    {
        "id": serializers.CharField(),
        "kind": serializers.ChoiceField(choices=["version", "recall", "session", "record"]),
        "hop": serializers.IntegerField(),
        "resource": serializers.CharField(required=False),
        "document": serializers.CharField(required=False),
        "revision": serializers.CharField(required=False, allow_null=True),
        "session": serializers.CharField(required=False, allow_null=True),
        "recordId": serializers.CharField(required=False, allow_null=True),
        "operation": serializers.CharField(
            required=False,
            help_text="A record node of a write its provider had not finished: its operation.",
        ),
        "pending": serializers.BooleanField(required=False),
        "createdAt": serializers.DateTimeField(required=False),
    },
)
EDGE = inline_serializer(
    "IncidentEdge",
    {
        "from": serializers.CharField(),
        "to": serializers.CharField(),
        "evidence": serializers.DictField(help_text="recall (id or null) and at (time)."),
    },
)
INCIDENT = inline_serializer(
    "Incident",
    {
        "id": serializers.CharField(),
        "title": serializers.CharField(),
        "source": serializers.DictField(),
        "hops": serializers.IntegerField(),
        "createdBy": serializers.CharField(),
        "createdAt": serializers.DateTimeField(),
        "containedAt": serializers.DateTimeField(allow_null=True),
        "counts": serializers.DictField(child=serializers.IntegerField()),
        "documents": serializers.ListField(child=serializers.DictField()),
        "sessions": serializers.ListField(child=serializers.DictField()),
        "graph": inline_serializer(
            "IncidentGraph",
            {"nodes": NODE.__class__(many=True), "edges": EDGE.__class__(many=True)},
        ),
        "containment": serializers.DictField(allow_null=True),
    },
)
INCIDENT_PAGE = inline_serializer(
    "IncidentPage",
    {
        "incidents": serializers.ListField(child=serializers.DictField()),
        "nextCursor": serializers.CharField(allow_null=True),
    },
)
CONTAINMENT = OpenApiResponse(
    inline_serializer(
        "Containment",
        {
            "incident": serializers.CharField(),
            "dryRun": serializers.BooleanField(),
            "actions": serializers.ListField(child=serializers.CharField()),
            "nodes": serializers.ListField(child=serializers.DictField()),
            "documents": serializers.ListField(child=serializers.DictField()),
            "deadLetters": serializers.ListField(
                child=serializers.CharField(),
                help_text="The dead letters of records' deletes that failed (operations).",
            ),
            "queued": serializers.ListField(
                child=serializers.CharField(),
                help_text="The open operations of records' deletes the provider queued "
                "(memory/operations).",
            ),
            "pending": serializers.ListField(
                child=serializers.CharField(),
                help_text="The operations of tainted writes the provider has not finished: "
                "the kept report is completed for each once it settles.",
            ),
            "changed": serializers.IntegerField(),
        },
    ),
    description="What happened (a dry run: would happen) to every node.",
)


class IncidentListView(ApiView):
    @extend_schema(
        parameters=[ENVIRONMENT, CURSOR],
        responses={200: INCIDENT_PAGE, **ERRORS},
        operation_id="incidents_list",
        description="The environment's incidents, newest first (without their graphs).",
    )
    def get(self, request: Request, p: str) -> Response:
        rows, next_cursor = incident_services.incident_list(
            project=self.project(request, p),
            environment=self.environment(request),
            cursor=self.cursor(request),
        )
        incidents = [incident_services.incident_summary(row) for row in rows]
        return Response({"incidents": incidents, "nextCursor": next_cursor})

    @extend_schema(
        request=IncidentInput,
        parameters=[ENVIRONMENT],
        responses={201: INCIDENT, **ERRORS},
        operation_id="incidents_create",
        description="Opens an incident: traces what the source reached, hop by hop (the "
        "versions it wrote or that hold the text, the recalls that showed them, those "
        "recalls' sessions and what they wrote afterwards), and keeps the graph.",
    )
    def post(self, request: Request, p: str) -> Response:
        project = self.project(request, p, write=True)
        data: dict[str, Any] = s.validated(IncidentInput, request)
        incident = incident_services.incident_create(
            project=project,
            environment=self.environment(request),
            title=data.get("title"),
            source=data.get("source"),
            hops=data.get("hops"),
            actor=self.actor(request),
        )
        return Response(incident_services.incident_dict(incident), status=201)


class _IncidentView(ApiView):
    def incident(self, request: Request, p: str, i: str, *, write: bool = False) -> Incident:
        return incident_services.incident_get(
            project=self.project(request, p, write=write),
            environment=self.environment(request),
            incident_id=i,
        )


class IncidentDetailView(_IncidentView):
    @extend_schema(
        parameters=[ENVIRONMENT],
        responses={200: INCIDENT, **ERRORS},
        operation_id="incidents_get",
        description="An incident with its graph, affected documents and sessions, and its "
        "last containment.",
    )
    def get(self, request: Request, p: str, i: str) -> Response:
        return Response(incident_services.incident_dict(self.incident(request, p, i)))


class IncidentContainView(_IncidentView):
    @extend_schema(
        request=ContainInput,
        parameters=[ENVIRONMENT],
        responses={200: CONTAINMENT, **ERRORS},
        operation_id="incidents_contain",
        description="Contains the incident in one action: freezes every affected document, "
        "ends every affected active session, reverts every tainted write conditionally (a "
        "document others changed since is reported with the merge), deletes tainted external "
        "records through their provider (failures become dead letters) and revokes a source "
        "key. `dryRun` reports and writes nothing (read-only keys may); containing again "
        "changes nothing more.",
    )
    def post(self, request: Request, p: str, i: str) -> Response:
        data: dict[str, Any] = s.validated(ContainInput, request)
        dry_run = contain_services.check_dry_run(data.get("dryRun"))
        incident = self.incident(request, p, i, write=not dry_run)
        report = contain_services.incident_contain(
            incident=incident,
            dry_run=dry_run,
            actions=data.get("actions"),
            actor=self.actor(request),
        )
        return Response(report)
