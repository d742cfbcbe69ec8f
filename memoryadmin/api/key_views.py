"""API keys of one project: list, create, revoke, rotate.

Open to read-write keys that reach the project; keys that reach every project
are made and ended only with `manage.py apikey`.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from memoryadmin.api import serializers as s
from memoryadmin.api.base import CURSOR, ERRORS, ApiView
from memoryadmin.memory.models import ApiKey, Project
from memoryadmin.memory.representations import api_key_dict
from memoryadmin.memory.services import keys as key_services

KEY_ERRORS = {
    **ERRORS,
    404: OpenApiResponse(s.ErrorOutput, description="api_key_not_found / project_not_found"),
}


class ApiKeyView(ApiView):
    def project(self, request: Request, p: str, *, write: bool = False) -> Project:
        project = super().project(request, p, write=write)
        key_services.check_key_manager(self.key(request))
        return project

    def target(self, request: Request, p: str, k: str) -> ApiKey:
        project = self.project(request, p, write=True)
        return key_services.api_key_get(ref=k, project_id=project.id, scoped=True)


class ApiKeyListView(ApiKeyView):
    @extend_schema(
        parameters=[CURSOR],
        responses={200: s.ApiKeyListOutput, **ERRORS},
        operation_id="api_keys_list",
        description="The project's keys, newest first, revoked ones included, 50 a page.",
    )
    def get(self, request: Request, p: str) -> Response:
        project = self.project(request, p, write=True)
        keys, next_cursor = key_services.api_key_page(
            project_id=project.id, cursor=self.cursor(request)
        )
        return Response({"apiKeys": [api_key_dict(key) for key in keys], "nextCursor": next_cursor})

    @extend_schema(
        request=s.ApiKeyCreateInput,
        responses={201: s.ApiKeyCreatedOutput, **ERRORS},
        operation_id="api_keys_create",
        description="The response carries the key's secret; it is never shown again.",
    )
    def post(self, request: Request, p: str) -> Response:
        project = self.project(request, p, write=True)
        data = s.validated(s.ApiKeyCreateInput, request)
        key, secret = key_services.api_key_create(
            project_id=project.id,
            read_only=data["readOnly"],
            name=data.get("name", ""),
            actor=self.actor(request),
        )
        return Response({**api_key_dict(key), "secret": secret}, status=201)


class ApiKeyRevokeView(ApiKeyView):
    @extend_schema(
        request=None,
        responses={200: s.ApiKeyOutput, **KEY_ERRORS},
        operation_id="api_keys_revoke",
        description="The key stops working at once; revoking a revoked key changes nothing.",
    )
    def post(self, request: Request, p: str, k: str) -> Response:
        key = key_services.api_key_revoke(key=self.target(request, p, k), actor=self.actor(request))
        return Response(api_key_dict(key))


class ApiKeyRotateView(ApiKeyView):
    @extend_schema(
        request=s.ApiKeyRotateInput,
        responses={
            201: s.ApiKeyCreatedOutput,
            **KEY_ERRORS,
            409: OpenApiResponse(
                s.ErrorOutput, description="conflict: the key is revoked or rotated already"
            ),
        },
        operation_id="api_keys_rotate",
        description="A new key with the same name and access; the old one keeps working for "
        "graceSeconds. The response carries the new key's secret, shown once.",
    )
    def post(self, request: Request, p: str, k: str) -> Response:
        old = self.target(request, p, k)
        data = s.validated(s.ApiKeyRotateInput, request)
        key, secret = key_services.api_key_rotate(
            key=old, actor=self.actor(request), grace_seconds=data["graceSeconds"]
        )
        return Response({**api_key_dict(key), "secret": secret}, status=201)
