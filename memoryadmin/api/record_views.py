"""Records of resources whose provider keeps them elsewhere: list, search, create, read,
update, delete and history, through the provider (memoryadmin/agents/services/records.py)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from memoryadmin.agents.services import records as record_services
from memoryadmin.api import serializers as s
from memoryadmin.api.base import CURSOR, ENVIRONMENT, ERRORS, ApiView
from memoryadmin.api.conditions import etag, optional_if_match
from memoryadmin.core.cancellation import caller_connection, client_gone_probe
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.memory.models import Resource
from memoryadmin.memory.services import deployments as deployment_services

NAMESPACE = OpenApiParameter(
    "namespace",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    required=True,
    description="The provider partition the records live in (a session binding's namespace id).",
)
QUERY = OpenApiParameter(
    "q", OpenApiTypes.STR, OpenApiParameter.QUERY, description="Search with the provider."
)
IF_MATCH = OpenApiParameter(
    "If-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="The record's ETag as read: the change is made only while the record's text "
    "is still the one read (412 otherwise, nothing sent).",
)
PROVIDER_ERRORS = {
    **ERRORS,
    409: OpenApiResponse(
        s.ErrorOutput,
        description="cancelled: the client went away while the provider was called; a "
        "write's details.operation names the open operation that keeps it",
    ),
    429: OpenApiResponse(s.ErrorOutput, description="provider_failed (concurrency limit)"),
    502: OpenApiResponse(s.ErrorOutput, description="provider_failed"),
}


class RecordView(ApiView):
    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        # A client that goes away cancels its provider calls, where the server can see it.
        with caller_connection(client_gone_probe(request)):
            return super().dispatch(request, *args, **kwargs)

    def record_resource(self, request: Request, p: str, r: str, *, write: bool = False) -> Resource:
        project = self.project(request, p, write=write)
        environment = self.environment(request)
        return deployment_services.resource_get(
            project=project, environment=environment, resource_id=r
        )

    def namespace(self, request: Request) -> str:
        return record_services.check_namespace(request.query_params.get("namespace"))


def _write_response(result: dict[str, object], done: int) -> Response:
    return Response(result, status=202 if result["status"] == "queued" else done)


class RecordListView(RecordView):
    @extend_schema(
        parameters=[ENVIRONMENT, NAMESPACE, CURSOR, QUERY],
        responses={200: s.RecordPageOutput, **PROVIDER_ERRORS},
        operation_id="records_list",
        description="The namespace's records, in the provider's order; with q, the provider's "
        "search results (one page).",
    )
    def get(self, request: Request, p: str, r: str) -> Response:
        resource = self.record_resource(request, p, r)
        namespace = self.namespace(request)
        query = s.require_query_string(request, "q")
        if query is not None:
            if self.cursor(request) is not None:
                raise InvalidRequest("q and cursor cannot be combined: a search is one page.")
            records = record_services.record_search(
                resource=resource, namespace=namespace, query=query
            )
            return Response({"records": records, "nextCursor": None})
        records, next_cursor = record_services.record_list(
            resource=resource, namespace=namespace, cursor=self.cursor(request)
        )
        return Response({"records": records, "nextCursor": next_cursor})

    @extend_schema(
        parameters=[ENVIRONMENT, NAMESPACE],
        request=s.RecordInput,
        responses={201: s.RecordWriteOutput, 202: s.RecordWriteOutput, **PROVIDER_ERRORS},
        operation_id="records_create",
        description="Adds a record through the provider: 201 when stored, 202 while the "
        "provider has it queued.",
    )
    def post(self, request: Request, p: str, r: str) -> Response:
        resource = self.record_resource(request, p, r, write=True)
        namespace = self.namespace(request)
        data = s.validated(s.RecordInput, request)
        result = record_services.record_create(
            resource=resource, namespace=namespace, text=data["text"], actor=self.actor(request)
        )
        return _write_response(result, 201)


class RecordDetailView(RecordView):
    @extend_schema(
        parameters=[ENVIRONMENT, NAMESPACE],
        responses={200: s.RecordOutput, **PROVIDER_ERRORS},
        operation_id="records_retrieve",
    )
    def get(self, request: Request, p: str, r: str, rec: str) -> Response:
        resource = self.record_resource(request, p, r)
        record = record_services.record_get(
            resource=resource, namespace=self.namespace(request), record_id=rec
        )
        return Response(record, headers={"ETag": etag(record_services.record_seen(record["text"]))})

    @extend_schema(
        parameters=[ENVIRONMENT, NAMESPACE, IF_MATCH],
        request=s.RecordInput,
        responses={200: s.RecordWriteOutput, 202: s.RecordWriteOutput, **PROVIDER_ERRORS},
        operation_id="records_update",
    )
    def patch(self, request: Request, p: str, r: str, rec: str) -> Response:
        resource = self.record_resource(request, p, r, write=True)
        namespace = self.namespace(request)
        data = s.validated(s.RecordInput, request)
        result = record_services.record_update(
            resource=resource,
            namespace=namespace,
            record_id=rec,
            text=data["text"],
            actor=self.actor(request),
            seen=optional_if_match(request),
        )
        return _write_response(result, 200)

    @extend_schema(
        parameters=[ENVIRONMENT, NAMESPACE, IF_MATCH],
        responses={200: s.RecordWriteOutput, 202: s.RecordWriteOutput, **PROVIDER_ERRORS},
        operation_id="records_delete",
    )
    def delete(self, request: Request, p: str, r: str, rec: str) -> Response:
        resource = self.record_resource(request, p, r, write=True)
        result = record_services.record_delete(
            resource=resource,
            namespace=self.namespace(request),
            record_id=rec,
            actor=self.actor(request),
            seen=optional_if_match(request),
        )
        return _write_response(result, 200)


class RecordHistoryView(RecordView):
    @extend_schema(
        parameters=[ENVIRONMENT, NAMESPACE],
        responses={200: s.RecordHistoryOutput, **PROVIDER_ERRORS},
        operation_id="records_history",
    )
    def get(self, request: Request, p: str, r: str, rec: str) -> Response:
        resource = self.record_resource(request, p, r)
        history = record_services.record_history(
            resource=resource, namespace=self.namespace(request), record_id=rec
        )
        return Response({"history": history})
