"""Erasures of a project's environment: preview (dry run), erase with a signed receipt, list,
read; and the public key that verifies receipts (docs/incidents.md)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from memoryadmin.api import serializers as s
from memoryadmin.api.base import CURSOR, ENVIRONMENT, ERRORS, ApiView
from memoryadmin.core.cancellation import caller_connection, client_gone_probe
from memoryadmin.erasures import services
from memoryadmin.erasures.receipts import public_key

ERASE_ERRORS = {
    **ERRORS,
    413: OpenApiResponse(s.ErrorOutput, description="erasure_too_large"),
    503: OpenApiResponse(s.ErrorOutput, description="not_configured: no signing key"),
}


class ErasureListView(ApiView):
    @extend_schema(
        parameters=[ENVIRONMENT, CURSOR],
        responses={200: s.ErasurePageOutput, **ERRORS},
        operation_id="erasures_list",
        description="Past erasures, newest first, each with its signed receipt.",
    )
    def get(self, request: Request, p: str) -> Response:
        rows, next_cursor = services.erasure_list(
            project=self.project(request, p),
            environment=self.environment(request),
            cursor=self.cursor(request),
        )
        return Response(
            {"erasures": [services.erasure_dict(row) for row in rows], "nextCursor": next_cursor}
        )

    @extend_schema(
        parameters=[ENVIRONMENT],
        request=s.ErasureInput,
        responses={200: s.ErasureCountsOutput, 201: s.ErasureOutput, **ERASE_ERRORS},
        operation_id="erasures_run",
        description="Removes every stored copy of an exact text, or of named documents: "
        "current text, versions (redacted), search index, proposals, recalls, session events, "
        "audit details, webhook payloads and records of external providers (deleted through "
        "the provider; a failure is a dead letter the receipt names). 201 with the erasure "
        "and its receipt, signed with the server's Ed25519 key. `dryRun` answers 200 with "
        "the counts and changes nothing; read-only keys may run it.",
    )
    def post(self, request: Request, p: str) -> Response:
        data = s.validated(s.ErasureInput, request)
        dry_run = bool(data.get("dryRun", False))
        project = self.project(request, p, write=not dry_run)
        with caller_connection(client_gone_probe(request)):
            outcome = services.erasure_run(
                project=project,
                environment=self.environment(request),
                match=data["match"],
                reason=data["reason"],
                dry_run=dry_run,
                actor=self.actor(request),
            )
        return Response(outcome.as_dict(), status=200 if dry_run else 201)


class ErasureDetailView(ApiView):
    @extend_schema(
        parameters=[ENVIRONMENT],
        responses={200: s.ErasureOutput, **ERRORS},
        operation_id="erasures_get",
        description="One erasure and its signed receipt.",
    )
    def get(self, request: Request, p: str, e: str) -> Response:
        erasure = services.erasure_get(
            project=self.project(request, p), environment=self.environment(request), erasure_id=e
        )
        return Response(services.erasure_dict(erasure))


class ErasureKeyView(ApiView):
    authentication_classes = []
    permission_classes = [AllowAny]
    throttle_classes = []

    @extend_schema(
        auth=[],
        responses={200: s.ErasureKeyOutput, 503: ERASE_ERRORS[503]},
        operation_id="erasure_key",
        description="The public key that verifies erasure receipts (no authentication).",
    )
    def get(self, request: Request) -> Response:
        return Response(public_key().as_dict())
