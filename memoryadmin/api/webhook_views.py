"""Webhook endpoints through the management API (read-write keys that reach the project)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from memoryadmin.api import serializers as s
from memoryadmin.api.base import CURSOR, ERRORS, ApiView
from memoryadmin.webhooks import services
from memoryadmin.webhooks.models import DeliveryState, Endpoint
from memoryadmin.webhooks.outbox import EVENT_TYPES
from memoryadmin.webhooks.representations import delivery_dict, endpoint_dict

NOT_FOUND = {
    **ERRORS,
    404: OpenApiResponse(s.ErrorOutput, description="webhook_not_found / project_not_found"),
}


class EndpointCreateInput(s.StrictSerializer):
    url = s.StrictCharField(help_text="https:// URL (http:// only on loopback), at most 2048.")
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=EVENT_TYPES), help_text="The events wanted."
    )
    description = s.StrictCharField(required=False, allow_blank=True)


class EndpointPatchInput(s.StrictSerializer):
    url = s.StrictCharField(required=False)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=EVENT_TYPES), required=False
    )
    description = s.StrictCharField(required=False, allow_blank=True)
    active = s.StrictBooleanField(required=False)


class EndpointOutput(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.CharField()
    events = serializers.ListField(child=serializers.CharField())
    description = serializers.CharField()
    active = serializers.BooleanField()
    createdAt = serializers.DateTimeField()


class EndpointCreatedOutput(EndpointOutput):
    secret = serializers.CharField(help_text="The signing secret: shown in this response only.")


class EndpointListOutput(serializers.Serializer):
    webhooks = EndpointOutput(many=True)


class DeliveryOutput(serializers.Serializer):
    id = serializers.IntegerField()
    eventId = serializers.CharField()
    event = serializers.CharField()
    state = serializers.ChoiceField(choices=DeliveryState.values)
    attempts = serializers.IntegerField()
    responseCode = serializers.IntegerField(allow_null=True)
    error = serializers.CharField()
    body = serializers.CharField(help_text="The JSON sent (and signed), byte for byte.")
    responseExcerpt = serializers.CharField(
        help_text="The first KiB of the receiver's last reply, as text."
    )
    createdAt = serializers.DateTimeField()
    lastAttemptAt = serializers.DateTimeField(allow_null=True)
    nextAttemptAt = serializers.DateTimeField(allow_null=True)
    deliveredAt = serializers.DateTimeField(allow_null=True)


class DeliveryPageOutput(serializers.Serializer):
    deliveries = DeliveryOutput(many=True)
    nextCursor = serializers.CharField(allow_null=True)


STATE = OpenApiParameter(
    "state",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    enum=DeliveryState.values,
    description="Only deliveries in this state.",
)


class WebhookView(ApiView):
    def target(self, request: Request, p: str, w: str) -> Endpoint:
        project = self.project(request, p, write=True)
        return services.endpoint_get(project=project, endpoint_id=w)


class WebhookListView(WebhookView):
    @extend_schema(responses={200: EndpointListOutput, **ERRORS}, operation_id="webhooks_list")
    def get(self, request: Request, p: str) -> Response:
        project = self.project(request, p, write=True)
        endpoints = services.endpoint_list(project=project)
        return Response({"webhooks": [endpoint_dict(e) for e in endpoints]})

    @extend_schema(
        request=EndpointCreateInput,
        responses={201: EndpointCreatedOutput, **ERRORS},
        operation_id="webhooks_create",
        description="Registers an endpoint. The response carries its signing secret, shown once.",
    )
    def post(self, request: Request, p: str) -> Response:
        project = self.project(request, p, write=True)
        data = s.validated(EndpointCreateInput, request)
        endpoint, secret = services.endpoint_create(
            project=project,
            url=data["url"],
            events=data["events"],
            description=data.get("description", ""),
            actor=self.actor(request),
        )
        return Response({**endpoint_dict(endpoint), "secret": secret}, status=201)


class WebhookDetailView(WebhookView):
    @extend_schema(responses={200: EndpointOutput, **NOT_FOUND}, operation_id="webhooks_get")
    def get(self, request: Request, p: str, w: str) -> Response:
        return Response(endpoint_dict(self.target(request, p, w)))

    @extend_schema(
        request=EndpointPatchInput,
        responses={200: EndpointOutput, **NOT_FOUND},
        operation_id="webhooks_patch",
        description="Changes what is given. Deactivated, an endpoint keeps its deliveries "
        "queued; reactivated, it is sent them in order.",
    )
    def patch(self, request: Request, p: str, w: str) -> Response:
        endpoint = self.target(request, p, w)
        data = s.validated(EndpointPatchInput, request)
        endpoint = services.endpoint_update(endpoint=endpoint, actor=self.actor(request), **data)
        return Response(endpoint_dict(endpoint))

    @extend_schema(
        responses={204: OpenApiResponse(description="Deleted."), **NOT_FOUND},
        operation_id="webhooks_delete",
        description="Deletes the endpoint and its deliveries, sent or not.",
    )
    def delete(self, request: Request, p: str, w: str) -> Response:
        services.endpoint_delete(endpoint=self.target(request, p, w), actor=self.actor(request))
        return Response(status=204)


class WebhookRotateView(WebhookView):
    @extend_schema(
        request=None,
        responses={200: EndpointCreatedOutput, **NOT_FOUND},
        operation_id="webhooks_rotate_secret",
        description="A new signing secret, shown in this response only; the old one stops at once.",
    )
    def post(self, request: Request, p: str, w: str) -> Response:
        endpoint, secret = services.endpoint_rotate_secret(
            endpoint=self.target(request, p, w), actor=self.actor(request)
        )
        return Response({**endpoint_dict(endpoint), "secret": secret})


class DeliveryListView(WebhookView):
    @extend_schema(
        parameters=[STATE, CURSOR],
        responses={200: DeliveryPageOutput, **NOT_FOUND},
        operation_id="webhooks_deliveries",
        description="The endpoint's deliveries, newest first.",
    )
    def get(self, request: Request, p: str, w: str) -> Response:
        endpoint = self.target(request, p, w)
        rows, next_cursor = services.delivery_list(
            endpoint=endpoint,
            state=s.require_query_string(request, "state"),
            cursor=self.cursor(request),
        )
        return Response({"deliveries": [delivery_dict(d) for d in rows], "nextCursor": next_cursor})


class RedeliverView(WebhookView):
    @extend_schema(
        request=None,
        responses={
            202: DeliveryOutput,
            **ERRORS,
            404: OpenApiResponse(s.ErrorOutput, description="delivery_not_found"),
        },
        operation_id="webhooks_redeliver",
        description="Sends a delivered or failed delivery again (same event id and body). "
        "A delivery still open is left as it is.",
    )
    def post(self, request: Request, p: str, w: str, d: str) -> Response:
        delivery, _ = services.delivery_redeliver(
            endpoint=self.target(request, p, w), delivery_id=d, actor=self.actor(request)
        )
        return Response(delivery_dict(delivery), status=202)


class WebhookTestView(WebhookView):
    @extend_schema(
        request=None,
        responses={202: DeliveryOutput, **ERRORS},
        operation_id="webhooks_test",
        description="Queues a webhook.test event to this endpoint, whatever events it wants: "
        "a delivery like any other (signed, sent in order, retried, recorded). At most "
        f"{services.TESTS_OPEN_MAX} test events wait at once (400 past it).",
    )
    def post(self, request: Request, p: str, w: str) -> Response:
        delivery = services.endpoint_send_test(
            endpoint=self.target(request, p, w), actor=self.actor(request)
        )
        return Response(delivery_dict(delivery), status=202)
