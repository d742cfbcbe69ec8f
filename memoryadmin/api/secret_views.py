"""Managed secrets through the management API: values go in, only names come out."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from memoryadmin.api import serializers as s
from memoryadmin.api.base import ENVIRONMENT, ERRORS, ApiView
from memoryadmin.providers.representations import secret_dict
from memoryadmin.providers.services import secrets as secret_services


class SecretSetInput(s.StrictSerializer):
    value = s.StrictCharField(
        help_text="The secret value: printable ASCII, at most 4096 characters. Never returned."
    )
    origins = serializers.ListField(
        child=s.StrictCharField(),
        required=False,
        help_text=(
            "The origins (https://host[:port]) the value may be sent to, 1-16. Required for "
            "a new secret; when replacing, omitted keeps the current origins."
        ),
    )


class SecretOutput(serializers.Serializer):
    name = serializers.CharField()
    origins = serializers.ListField(child=serializers.CharField())
    updatedAt = serializers.DateTimeField()


class SecretListOutput(serializers.Serializer):
    secrets = SecretOutput(many=True)


class SecretListView(ApiView):
    @extend_schema(
        parameters=[ENVIRONMENT],
        responses={200: SecretListOutput, **ERRORS},
        operation_id="secrets_list",
        description="The names of the environment's secrets; values are never returned.",
    )
    def get(self, request: Request, p: str) -> Response:
        project = self.project(request, p)
        rows = secret_services.secret_list(project=project, environment=self.environment(request))
        return Response({"secrets": [secret_dict(row) for row in rows]})


class SecretDetailView(ApiView):
    @extend_schema(
        parameters=[ENVIRONMENT],
        request=SecretSetInput,
        responses={204: OpenApiResponse(description="Stored."), **ERRORS},
        operation_id="secrets_put",
        description="Creates or replaces a secret that provider connections reference by name.",
    )
    def put(self, request: Request, p: str, name: str) -> Response:
        project = self.project(request, p, write=True)
        environment = self.environment(request)
        data = s.validated(SecretSetInput, request)
        secret_services.secret_set(
            project=project,
            environment=environment,
            name=name,
            value=data["value"],
            origins=data.get("origins"),
            actor=self.actor(request),
        )
        return Response(status=204)

    @extend_schema(
        parameters=[ENVIRONMENT],
        responses={204: OpenApiResponse(description="Deleted."), **ERRORS},
        operation_id="secrets_delete",
    )
    def delete(self, request: Request, p: str, name: str) -> Response:
        project = self.project(request, p, write=True)
        secret_services.secret_delete(
            project=project,
            environment=self.environment(request),
            name=name,
            actor=self.actor(request),
        )
        return Response(status=204)
