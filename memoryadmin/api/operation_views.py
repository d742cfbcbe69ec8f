"""Provider operations of a project's environment: list them, retry or discard dead letters."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from memoryadmin.agents.models import ProviderOperation
from memoryadmin.agents.services import operations as operation_services
from memoryadmin.api import serializers as s
from memoryadmin.api.base import CURSOR, ENVIRONMENT, ERRORS, ApiView
from memoryadmin.core.strings import strings_check

STATE = OpenApiParameter(
    "state",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    enum=list(operation_services.STATE_FILTERS),
    description="Only operations in this state (`open`: queued or partial).",
)
RESOURCE = OpenApiParameter(
    "resource", OpenApiTypes.STR, OpenApiParameter.QUERY, description="Only this resource's."
)
SESSION = OpenApiParameter(
    "session", OpenApiTypes.STR, OpenApiParameter.QUERY, description="Only this session's."
)
CONFLICT = {409: OpenApiResponse(s.ErrorOutput, description="conflict: not a dead letter")}


class OperationListView(ApiView):
    @extend_schema(
        parameters=[ENVIRONMENT, STATE, RESOURCE, SESSION, CURSOR],
        responses={200: s.OperationPageOutput, **ERRORS},
        operation_id="operations_list",
        description="Asynchronous provider operations, newest first: accepted and uncertain "
        "writes until the provider confirms where they ended, and dead letters.",
    )
    def get(self, request: Request, p: str) -> Response:
        project = self.project(request, p)
        query = {name: request.query_params.get(name) for name in ("state", "resource", "session")}
        strings_check(query, field="query")
        rows, next_cursor = operation_services.operation_list(
            project=project,
            environment=self.environment(request),
            state=query["state"],
            resource_id=query["resource"],
            session_id=query["session"],
            cursor=self.cursor(request),
        )
        operations = [operation_services.operation_dict(row) for row in rows]
        return Response({"operations": operations, "nextCursor": next_cursor})


class OperationDetailView(ApiView):
    @extend_schema(
        parameters=[ENVIRONMENT],
        responses={200: s.OperationOutput, **ERRORS},
        operation_id="operations_get",
        description="One operation, as the list shows it: where a write answered `queued` "
        "(its `operation`) stands now.",
    )
    def get(self, request: Request, p: str, o: str) -> Response:
        operation = operation_services.operation_get(
            project=self.project(request, p), environment=self.environment(request), operation_id=o
        )
        return Response(operation_services.operation_dict(operation))


class _DeadLetterView(ApiView):
    def operation(self, request: Request, p: str, o: str) -> ProviderOperation:
        project = self.project(request, p, write=True)
        return operation_services.operation_get(
            project=project, environment=self.environment(request), operation_id=o
        )


class OperationRetryView(_DeadLetterView):
    @extend_schema(
        request=None,
        parameters=[ENVIRONMENT],
        responses={200: s.OperationOutput, **ERRORS, **CONFLICT},
        operation_id="operations_retry",
        description="Checks a dead letter again from the start (fresh attempts and deadline).",
    )
    def post(self, request: Request, p: str, o: str) -> Response:
        operation = operation_services.operation_retry(
            operation=self.operation(request, p, o), actor=self.actor(request)
        )
        return Response(operation_services.operation_dict(operation))


class OperationDiscardView(_DeadLetterView):
    @extend_schema(
        request=None,
        parameters=[ENVIRONMENT],
        responses={200: s.OperationOutput, **ERRORS, **CONFLICT},
        operation_id="operations_discard",
        description="Sets a dead letter aside: it stays listed as discarded, never checked again.",
    )
    def post(self, request: Request, p: str, o: str) -> Response:
        operation = operation_services.operation_discard(
            operation=self.operation(request, p, o), actor=self.actor(request)
        )
        return Response(operation_services.operation_dict(operation))
