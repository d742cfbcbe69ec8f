"""Management API views for what the page and CLI could already do: restore a version,
read the audit log, export and import a project's memory."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpResponse, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from memoryadmin.api import serializers as s
from memoryadmin.api.base import CURSOR, ENVIRONMENT, ERRORS, WRITE_ERRORS, ApiView
from memoryadmin.api.conditions import required_if_match
from memoryadmin.api.parsers import ZipUploadParser
from memoryadmin.api.views import IF_MATCH, SEARCH_Q, document_response
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.core.inputs import parse_instant
from memoryadmin.memory.exportzip import export_download
from memoryadmin.memory.limits import check_document_id, check_resource_id
from memoryadmin.memory.representations import audit_dict, search_hit_dict, version_dict
from memoryadmin.memory.services import documents as document_services
from memoryadmin.memory.services.audit import AuditFilter, audit_list
from memoryadmin.memory.services.redaction import version_redact
from memoryadmin.memory.services.search import document_resources, document_search
from memoryadmin.memory.services.transfer import export_resources_check, import_zip


class DocumentRestoreView(ApiView):
    @extend_schema(
        parameters=[ENVIRONMENT, IF_MATCH],
        request=None,
        responses={200: s.DocumentOutput, **WRITE_ERRORS},
        operation_id="documents_restore",
        description="Makes the text and summary of an old version (named by its revision) "
        "current again, as a new version; the same rules as a replace.",
    )
    def post(self, request: Request, p: str, r: str, doc_id: str, revision: str) -> HttpResponse:
        resource = self.resource(request, p, r, write=True)
        expected = required_if_match(request)
        document = document_services.document_restore(
            resource=resource,
            doc_id=doc_id,
            revision=revision,
            expected_revision=expected,
            actor=self.actor(request),
        )
        return document_response(self, request, document, resource)


class VersionRedactView(ApiView):
    @extend_schema(
        parameters=[ENVIRONMENT],
        request=s.RedactInput,
        responses={200: s.VersionOutput, 409: s.ErrorOutput, **ERRORS},
        operation_id="documents_version_redact",
        description="Irreversibly replaces an old version's title, summary and text with "
        "`[redacted]`, keeping its metadata; audited with the reason. The current version "
        "is 409: edit the document first.",
    )
    def post(self, request: Request, p: str, r: str, doc_id: str, revision: str) -> Response:
        resource = self.resource(request, p, r, write=True)
        data = s.validated(s.RedactInput, request)
        version = version_redact(
            resource=resource,
            doc_id=doc_id,
            revision=revision,
            reason=data["reason"],
            actor=self.actor(request),
        )
        return Response(version_dict(version, include_text=True))


def _query(request: Request, name: str) -> str:
    return s.require_query_string(request, name) or ""


def _time(request: Request, name: str) -> datetime | None:
    # A date alone means its midnight, UTC.
    value = s.require_query_string(request, name)
    return None if value is None else parse_instant(value, field=name)


AUDIT_FILTERS = [
    OpenApiParameter(name, OpenApiTypes.STR, OpenApiParameter.QUERY, description=text)
    for name, text in {
        "resource": "Only entries about this resource.",
        "document": "Only entries about this document id.",
        "actor": "Only this actor, exactly as listed (`key:mak_…`, `user:alice`, `cli:root`).",
        "action": "Only this action, e.g. `document.replace`.",
    }.items()
] + [
    OpenApiParameter(name, OpenApiTypes.DATETIME, OpenApiParameter.QUERY, description=text)
    for name, text in {
        "since": "Entries at or after this time (ISO 8601).",
        "until": "Entries before this time (ISO 8601).",
    }.items()
]


class AuditListView(ApiView):
    @extend_schema(
        parameters=[ENVIRONMENT, *AUDIT_FILTERS, CURSOR],
        responses={200: s.AuditPageOutput, **ERRORS},
        operation_id="audit_list",
        description="The project's audit log, newest first, in keyset pages of 50. Without "
        "resource or document, project-wide entries (roles, deployments, keys) are included.",
    )
    def get(self, request: Request, p: str) -> Response:
        project = self.project(request, p)
        environment = self.environment(request)
        where = AuditFilter(
            resource_id=_query(request, "resource"),
            document_id=_query(request, "document"),
            actor=_query(request, "actor"),
            action=_query(request, "action"),
            since=_time(request, "since"),
            until=_time(request, "until"),
        )
        if where.resource_id:
            check_resource_id(where.resource_id)
        if where.document_id:
            check_document_id(where.document_id)
        entries, next_cursor = audit_list(
            project=project, environment=environment, where=where, cursor=self.cursor(request)
        )
        return Response({"entries": [audit_dict(e) for e in entries], "nextCursor": next_cursor})


RESOURCES = OpenApiParameter(
    "resource",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    many=True,
    explode=True,
    description="Export only this resource (repeat for more); all document resources if absent.",
)


class MemoryExportView(ApiView):
    repeatable_query = frozenset({RESOURCES.name})

    @extend_schema(
        parameters=[ENVIRONMENT, RESOURCES],
        request=None,
        responses={
            (200, "application/zip"): OpenApiResponse(
                OpenApiTypes.BINARY,
                description="`<resource>/<id>.json` per document, then manifest.json.",
            ),
            **ERRORS,
        },
        operation_id="memory_export",
        description="Streams the same zip as the Memory page's export; on PostgreSQL one "
        "consistent snapshot (the manifest says whether it is).",
    )
    def post(self, request: Request, p: str) -> StreamingHttpResponse:
        project = self.project(request, p)
        environment = self.environment(request)
        wanted = request.query_params.getlist("resource") or None
        export_resources_check(project=project, environment=environment, resource_ids=wanted)
        return export_download(project, environment, wanted, self.actor(request))


class MemoryImportView(ApiView):
    parser_classes = [ZipUploadParser]

    @extend_schema(
        parameters=[
            ENVIRONMENT,
            OpenApiParameter(
                "dryRun",
                OpenApiTypes.BOOL,
                OpenApiParameter.QUERY,
                description="true: the same import rolled back at its end; the report says "
                "what it would do now and nothing is created.",
            ),
        ],
        request={"application/zip": OpenApiTypes.BINARY},
        responses={200: s.ImportReportOutput, 413: s.ErrorOutput, 429: s.ErrorOutput, **ERRORS},
        operation_id="memory_import",
        description="Creates the documents of an export zip that are free here; never "
        "overwrites; the report names every id. The zip is checked whole before anything "
        "is created and the documents are created in one transaction: a zip over the "
        "import limits, damaged or past the deadline creates nothing (400, 413). One "
        "import per project at a time (429).",
    )
    def post(self, request: Request, p: str) -> Response:
        project = self.project(request, p, write=True)
        environment = self.environment(request)
        upload: Any = request.data
        if not hasattr(upload, "read"):
            raise InvalidRequest("Send the export zip as the body, Content-Type: application/zip.")
        dry_run = request.query_params.get("dryRun", "false")
        if dry_run not in ("true", "false"):
            raise InvalidRequest("dryRun must be true or false.", details={"field": "dryRun"})
        with upload:
            report = import_zip(
                project=project,
                environment=environment,
                upload=upload,
                actor=self.actor(request),
                dry_run=dry_run == "true",
            )
        return Response({**report.as_dict(), "dryRun": dry_run == "true"})


class MemorySearchView(ApiView):
    @extend_schema(
        parameters=[
            ENVIRONMENT,
            OpenApiParameter(
                "q",
                OpenApiTypes.STR,
                OpenApiParameter.QUERY,
                required=True,
                description=SEARCH_Q.description,
            ),
            CURSOR,
        ],
        responses={200: s.SearchPageOutput, **ERRORS},
        operation_id="memory_search",
        description="Every document resource of the environment, ranked, 50 hits a page.",
    )
    def get(self, request: Request, p: str) -> Response:
        project = self.project(request, p)
        environment = self.environment(request)
        q = s.require_query_string(request, "q")
        if q is None:
            raise InvalidRequest("q is required.")
        resources = document_resources(project=project, environment=environment)
        rows, next_cursor = document_search(
            resources=resources,
            q=q,
            cursor=self.cursor(request),
            scope=f"{project.id}:{environment}",
        )
        by_id = {r.resource_id: r for r in resources}
        hits = [
            search_hit_dict(row, resource=by_id[row["resource"]], with_resource=True)
            for row in rows
        ]
        return Response({"documents": hits, "nextCursor": next_cursor})
