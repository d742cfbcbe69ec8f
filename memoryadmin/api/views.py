"""Management API views: translate HTTP to service calls and back, nothing more."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    PolymorphicProxySerializer,
    extend_schema,
)
from rest_framework.request import Request
from rest_framework.response import Response

from memoryadmin.agents.representations import reader_dict
from memoryadmin.agents.services.provenance import version_readers
from memoryadmin.api import serializers as s
from memoryadmin.api.base import CURSOR, ENVIRONMENT, ERRORS, WRITE_ERRORS, ApiView
from memoryadmin.api.conditions import etag, put_mode, required_if_match
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.memory.limits import agent_write_fields, check_agent_writes
from memoryadmin.memory.models import Deployment, Document, Proposal, Resource
from memoryadmin.memory.representations import (
    deployments_dicts,
    document_dict,
    document_entries,
    project_dict,
    proposal_dict,
    search_hit_dict,
    version_dict,
)
from memoryadmin.memory.services import asof as asof_services
from memoryadmin.memory.services import deployments as deployment_services
from memoryadmin.memory.services import documents as document_services
from memoryadmin.memory.services import proposals as proposal_services
from memoryadmin.memory.services.document_filters import document_facets
from memoryadmin.memory.services.projects import projects_for_key
from memoryadmin.memory.services.search import document_search

IF_MATCH = OpenApiParameter(
    "If-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=True,
    description='The document revision, quoted as in ETag: "<revision>".',
)
IF_MATCH_OPTIONAL = OpenApiParameter(
    "If-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description='Replace: the quoted revision ("<revision>"). Send this or If-None-Match.',
)
IF_NONE_MATCH = OpenApiParameter(
    "If-None-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="Create: exactly `*`. Send this or If-Match.",
)


class ProjectListView(ApiView):
    @extend_schema(responses={200: s.ProjectListOutput, **ERRORS}, operation_id="projects_list")
    def get(self, request: Request) -> Response:
        projects = projects_for_key(key=self.key(request))
        return Response({"projects": [project_dict(p) for p in projects]})


class ProjectDetailView(ApiView):
    @extend_schema(responses={200: s.ProjectOutput, **ERRORS}, operation_id="projects_retrieve")
    def get(self, request: Request, p: str) -> Response:
        return Response(project_dict(self.project(request, p)))


def _deployment_body(deployment: Deployment) -> dict[str, Any]:
    return deployments_dicts([deployment])[0]


class DeploymentListView(ApiView):
    @extend_schema(
        parameters=[OpenApiParameter("agent", OpenApiTypes.STR, OpenApiParameter.QUERY), CURSOR],
        responses={200: s.DeploymentListOutput, **ERRORS},
        operation_id="deployments_list",
        description="The project's deployments (of `agent`), newest first, 50 a page.",
    )
    def get(self, request: Request, p: str) -> Response:
        project = self.project(request, p)
        deployments, next_cursor = deployment_services.deployment_list(
            project=project,
            agent=s.require_query_string(request, "agent"),
            cursor=self.cursor(request),
        )
        return Response({"deployments": deployments_dicts(deployments), "nextCursor": next_cursor})

    @extend_schema(
        request=s.DeploymentCreateInput,
        responses={201: s.DeploymentOutput, 409: s.ErrorOutput, **ERRORS},
        operation_id="deployments_create",
    )
    def post(self, request: Request, p: str) -> Response:
        project = self.project(request, p, write=True)
        data = s.validated(s.DeploymentCreateInput, request)
        deployment = deployment_services.deployment_create(
            project=project,
            agent=data["agent"],
            memory=data["memory"],
            promote=data.get("promote"),
            actor=self.actor(request),
        )
        return Response(_deployment_body(deployment), status=201)


class DeploymentDetailView(ApiView):
    @extend_schema(
        responses={200: s.DeploymentOutput, **ERRORS}, operation_id="deployments_retrieve"
    )
    def get(self, request: Request, p: str, d: str) -> Response:
        project = self.project(request, p)
        deployment = deployment_services.deployment_get(project=project, deployment_id=d)
        return Response(_deployment_body(deployment))


class DeploymentPromoteView(ApiView):
    @extend_schema(
        request=s.PromoteInput,
        responses={200: s.DeploymentOutput, 409: s.ErrorOutput, **ERRORS},
        operation_id="deployments_promote",
    )
    def post(self, request: Request, p: str, d: str) -> Response:
        project = self.project(request, p, write=True)
        deployment = deployment_services.deployment_get(project=project, deployment_id=d)
        data = s.validated(s.PromoteInput, request)
        deployment_services.deployment_promote(
            deployment=deployment, environment=data["environment"], actor=self.actor(request)
        )
        return Response(_deployment_body(deployment))


class MemoryInventoryView(ApiView):
    @extend_schema(
        parameters=[ENVIRONMENT],
        responses={200: s.InventoryOutput, **ERRORS},
        operation_id="memory_inventory",
    )
    def get(self, request: Request, p: str) -> Response:
        project = self.project(request, p)
        environment = self.environment(request)
        resources = deployment_services.resource_inventory(project=project, environment=environment)
        return Response({"resources": resources})


SEARCH_Q = OpenApiParameter(
    "q",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    description='Search: words (all must occur), "a phrase", pre* (a prefix); see docs/api.md. '
    "With q the documents come ranked, each with a `snippet` (escaped HTML, matches in "
    "<mark>).",
)

# The list's facets (memoryadmin/memory/services/document_filters.py), as the page's URL
# names them too.
FACETS = [
    OpenApiParameter(name, kind, OpenApiParameter.QUERY, description=text, enum=enum)
    for name, kind, text, enum in [
        (
            "agentWrites",
            OpenApiTypes.STR,
            "Only documents in this agent write mode.",
            ["enabled", "review", "disabled"],
        ),
        (
            "writer",
            OpenApiTypes.STR,
            "Only documents last written by this kind of actor.",
            ["owner", "key", "agent"],
        ),
        (
            "key",
            OpenApiTypes.STR,
            "Only documents last written through the key with this prefix.",
            None,
        ),
        (
            "agent",
            OpenApiTypes.STR,
            "Only documents last written by a session of this agent.",
            None,
        ),
        ("session", OpenApiTypes.STR, "Only documents last written by this session.", None),
        ("updatedFrom", OpenApiTypes.STR, "Updated on or after this day (UTC) or time.", None),
        (
            "updatedTo",
            OpenApiTypes.STR,
            "Updated on or before this day (UTC), or before this time.",
            None,
        ),
        ("sizeMin", OpenApiTypes.INT, "At least this many UTF-8 bytes of text.", None),
        ("sizeMax", OpenApiTypes.INT, "At most this many UTF-8 bytes of text.", None),
    ]
]


class DocumentListView(ApiView):
    @extend_schema(
        parameters=[
            ENVIRONMENT,
            SEARCH_Q,
            CURSOR,
            *FACETS,
            OpenApiParameter(
                "asOf",
                OpenApiTypes.DATETIME,
                OpenApiParameter.QUERY,
                description="List the resource as it was at this time (ISO 8601), by id: "
                "each document with its version then; documents deleted since are listed "
                "with deleted: true and no content.",
            ),
        ],
        responses={200: s.DocumentPageOutput, **ERRORS},
        operation_id="documents_list",
    )
    def get(self, request: Request, p: str, r: str) -> Response:
        resource = self.resource(request, p, r)
        facets = document_facets(request.query_params)
        as_of = s.require_query_string(request, "asOf")
        if facets.narrowed and (as_of is not None or "q" in request.query_params):
            raise InvalidRequest("The list's filters do not combine with q or asOf.")
        if as_of is not None:
            entries, next_cursor = asof_services.document_list_as_of(
                resource=resource,
                as_of=asof_services.parse_as_of(as_of),
                cursor=self.cursor(request),
            )
            return Response(
                {
                    "documents": [e.as_dict(max_bytes=resource.max_bytes) for e in entries],
                    "nextCursor": next_cursor,
                }
            )
        q = s.require_query_string(request, "q")
        if q is not None:
            hits, next_cursor = document_search(
                resources=[resource], q=q, cursor=self.cursor(request), scope=str(resource.pk)
            )
            documents = [search_hit_dict(hit, resource=resource) for hit in hits]
            return Response({"documents": documents, "nextCursor": next_cursor})
        rows, next_cursor = document_services.document_list(
            resource=resource, cursor=self.cursor(request), facets=facets
        )
        return Response({"documents": document_entries(rows, resource), "nextCursor": next_cursor})


def _write_mode(value: object) -> dict[str, bool]:
    """No agentWrites: the document follows its resource's default."""
    return {} if value is None else agent_write_fields(check_agent_writes(value))


def document_response(
    view: ApiView, request: Request, document: Document, resource: Resource, status: int = 200
) -> HttpResponse:
    """The document object with its revision as ETag, rendered by `view` for `request`."""
    data = document_dict(
        document, max_bytes=resource.max_bytes, review_default=resource.review_default
    )
    return view.rendered(request, data, status=status, headers={"ETag": etag(document.revision)})


class DocumentDetailView(ApiView):
    # GET reads the document with the key and resource: one round trip (ApiKeyAuthentication).
    reads_document_with_key = True

    @extend_schema(
        parameters=[ENVIRONMENT],
        responses={200: s.DocumentOutput, **ERRORS},
        operation_id="documents_retrieve",
    )
    def get(self, request: Request, p: str, r: str, doc_id: str) -> HttpResponse:
        resource = self.resource(request, p, r)
        return document_response(self, request, self.document(request, resource, doc_id), resource)

    @extend_schema(
        parameters=[ENVIRONMENT, IF_NONE_MATCH, IF_MATCH_OPTIONAL],
        request=PolymorphicProxySerializer(
            component_name="DocumentPutInput",
            serializers=[s.DocumentCreateInput, s.DocumentReplaceInput],
            resource_type_field_name=None,
        ),
        responses={200: s.DocumentOutput, 201: s.DocumentOutput, **WRITE_ERRORS},
        operation_id="documents_put",
        description="Create with If-None-Match: * (body: DocumentCreateInput), or replace "
        "text and summary with If-Match (body: DocumentReplaceInput).",
    )
    def put(self, request: Request, p: str, r: str, doc_id: str) -> HttpResponse:
        resource = self.resource(request, p, r, write=True)
        if put_mode(request) == "create":
            data = s.validated(s.DocumentCreateInput, request)
            document = document_services.document_create(
                resource=resource,
                doc_id=doc_id,
                title=data["title"],
                text=data.get("text", ""),
                summary=data.get("summary", ""),
                **_write_mode(data.get("agentWrites")),
                actor=self.actor(request),
            )
            return document_response(self, request, document, resource, status=201)
        revision = required_if_match(request)
        data = s.validated(s.DocumentReplaceInput, request)
        document = document_services.document_replace(
            resource=resource,
            doc_id=doc_id,
            expected_revision=revision,
            text=data["text"],
            summary=data.get("summary"),
            actor=self.actor(request),
        )
        return document_response(self, request, document, resource)

    @extend_schema(
        parameters=[ENVIRONMENT, IF_MATCH],
        request=s.DocumentPatchInput,
        responses={200: s.DocumentOutput, **WRITE_ERRORS},
        operation_id="documents_patch",
    )
    def patch(self, request: Request, p: str, r: str, doc_id: str) -> HttpResponse:
        resource = self.resource(request, p, r, write=True)
        revision = required_if_match(request)
        data = s.validated(s.DocumentPatchInput, request)
        document = document_services.document_patch(
            resource=resource,
            doc_id=doc_id,
            expected_revision=revision,
            title=data.get("title"),
            **_write_mode(data.get("agentWrites")),
            actor=self.actor(request),
        )
        return document_response(self, request, document, resource)

    @extend_schema(
        parameters=[ENVIRONMENT, IF_MATCH],
        responses={204: None, **WRITE_ERRORS},
        operation_id="documents_delete",
    )
    def delete(self, request: Request, p: str, r: str, doc_id: str) -> HttpResponse:
        resource = self.resource(request, p, r, write=True)
        revision = required_if_match(request)
        document_services.document_delete(
            resource=resource, doc_id=doc_id, expected_revision=revision, actor=self.actor(request)
        )
        return Response(status=204)


class DocumentVersionsView(ApiView):
    @extend_schema(
        parameters=[
            ENVIRONMENT,
            CURSOR,
            OpenApiParameter("include", OpenApiTypes.STR, OpenApiParameter.QUERY, enum=["text"]),
        ],
        responses={200: s.VersionPageOutput, **ERRORS},
        operation_id="documents_versions",
    )
    def get(self, request: Request, p: str, r: str, doc_id: str) -> Response:
        resource = self.resource(request, p, r)
        include = request.query_params.get("include")
        if include not in (None, "text"):
            raise InvalidRequest("include accepts only 'text'.")
        document = document_services.document_get(resource=resource, doc_id=doc_id)
        versions, next_cursor = document_services.version_list(
            document=document, cursor=self.cursor(request)
        )
        return Response(
            {
                "versions": [version_dict(v, include_text=include == "text") for v in versions],
                "nextCursor": next_cursor,
            }
        )


PROPOSAL_STATE = OpenApiParameter(
    "state",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    enum=["pending", "approved", "rejected", "expired"],
    description="Default pending.",
)
IF_MATCH_CURRENT = OpenApiParameter(
    "If-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=True,
    description='The current revision of the document, quoted: "<revision>".',
)


def _proposal_body(proposal: Proposal) -> dict[str, Any]:
    return proposal_dict(proposal, now=timezone.now())


class ProposalListView(ApiView):
    @extend_schema(
        parameters=[
            ENVIRONMENT,
            PROPOSAL_STATE,
            CURSOR,
            OpenApiParameter("resource", OpenApiTypes.STR, OpenApiParameter.QUERY),
        ],
        responses={200: s.ProposalPageOutput, **ERRORS},
        operation_id="proposals_list",
    )
    def get(self, request: Request, p: str) -> Response:
        project = self.project(request, p)
        proposals, next_cursor = proposal_services.proposal_list(
            project=project,
            environment=self.environment(request),
            state=s.require_query_string(request, "state") or "pending",
            resource_id=s.require_query_string(request, "resource") or "",
            cursor=self.cursor(request),
        )
        return Response(
            {"proposals": [_proposal_body(x) for x in proposals], "nextCursor": next_cursor}
        )


class ProposalDetailView(ApiView):
    @extend_schema(
        parameters=[ENVIRONMENT],
        responses={200: s.ProposalOutput, **ERRORS},
        operation_id="proposals_retrieve",
    )
    def get(self, request: Request, p: str, proposal_id: str) -> Response:
        proposal = proposal_services.proposal_get(
            project=self.project(request, p),
            environment=self.environment(request),
            proposal_id=proposal_id,
        )
        return Response(_proposal_body(proposal))


class ProposalApproveView(ApiView):
    @extend_schema(
        parameters=[ENVIRONMENT, IF_MATCH_CURRENT],
        request=s.ProposalApproveInput,
        responses={200: s.DocumentOutput, 409: s.ErrorOutput, **WRITE_ERRORS},
        operation_id="proposals_approve",
        description="Writes the proposal (or `text`, the approver's edit of it) on top of "
        "the current revision named by If-Match. 412 when the document moved: details "
        "carry currentRevision and, when the changes do not overlap, the merged text. "
        "409 proposal_decided when it is no longer pending.",
    )
    def post(self, request: Request, p: str, proposal_id: str) -> HttpResponse:
        project = self.project(request, p, write=True)
        environment = self.environment(request)
        revision = required_if_match(request)
        data = s.validated(s.ProposalApproveInput, request)
        document = proposal_services.proposal_approve(
            project=project,
            environment=environment,
            proposal_id=proposal_id,
            expected_revision=revision,
            text=data.get("text"),
            summary=data.get("summary"),
            actor=self.actor(request),
        )
        resource = deployment_services.resource_get(
            project=project, environment=environment, resource_id=document.resource.resource_id
        )
        return document_response(self, request, document, resource)


class ProposalRejectView(ApiView):
    @extend_schema(
        parameters=[ENVIRONMENT],
        request=s.ProposalRejectInput,
        responses={200: s.ProposalOutput, 409: s.ErrorOutput, **ERRORS},
        operation_id="proposals_reject",
    )
    def post(self, request: Request, p: str, proposal_id: str) -> Response:
        project = self.project(request, p, write=True)
        data = s.validated(s.ProposalRejectInput, request)
        proposal = proposal_services.proposal_reject(
            project=project,
            environment=self.environment(request),
            proposal_id=proposal_id,
            reason=data["reason"],
            actor=self.actor(request),
        )
        return Response(_proposal_body(proposal))


class ResourceRestoreView(ApiView):
    @extend_schema(
        parameters=[ENVIRONMENT],
        request=s.RestoreAsOfInput,
        responses={200: s.RestoreAsOfOutput, **ERRORS},
        operation_id="documents_restore_as_of",
        description="Restores the chosen documents (default: every document of the "
        "resource) to their text and summary at `asOf`, each as a new conditional version. "
        "Deleted documents stay deleted and documents created since stay as they are. "
        "`dryRun` shows the plan and writes nothing.",
    )
    def post(self, request: Request, p: str, r: str) -> Response:
        data = s.validated(s.RestoreAsOfInput, request)
        dry_run = bool(data["dryRun"])
        resource = self.resource(request, p, r, write=not dry_run)
        plan = asof_services.resource_restore_as_of(
            resource=resource,
            as_of=asof_services.parse_as_of(data["asOf"]),
            doc_ids=data.get("documents"),
            dry_run=dry_run,
            actor=self.actor(request),
        )
        return Response(plan.as_dict())


class VersionReadersView(ApiView):
    @extend_schema(
        parameters=[ENVIRONMENT],
        responses={200: s.VersionReadersOutput, **ERRORS},
        operation_id="documents_version_readers",
        description="The sessions whose recalls showed this version to a model, newest "
        "first (at most 50).",
    )
    def get(self, request: Request, p: str, r: str, doc_id: str, revision: str) -> Response:
        resource = self.resource(request, p, r)
        document = document_services.document_get(resource=resource, doc_id=doc_id)
        version = document_services.version_get(document=document, revision=revision)
        recalls = version_readers(document=document, revision=version.revision)
        return Response({"readers": [reader_dict(recall) for recall in recalls]})
