"""Session routes of the management API and the runtime routes agent hosts call."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from memoryadmin.agents.models import Session
from memoryadmin.agents.representations import event_dict, recall_record_dict, sessions_dicts
from memoryadmin.agents.services import runtime
from memoryadmin.agents.services import sessions as session_services
from memoryadmin.agents.services.provenance import recall_list
from memoryadmin.agents.services.reverts import session_revert
from memoryadmin.api import session_serializers as s
from memoryadmin.api.base import CURSOR, ENVIRONMENT, ERRORS, ApiView
from memoryadmin.api.serializers import ErrorOutput, require_query_string, validated
from memoryadmin.core.cancellation import caller_connection, client_gone_probe
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.memory.models import Project
from memoryadmin.memory.representations import deployments_dicts
from memoryadmin.memory.services.projects import key_may_act

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=True,
    description="1-256 printable characters. Reusing a key with the same agent, deployment, "
    "environment and bindings returns the session it created (200).",
)
PROJECT_ID = OpenApiParameter(
    "projectId",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    description="Required only for keys that reach every project.",
)


def _error(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorOutput, description=description)


RETRY_AFTER = OpenApiParameter(
    "Retry-After",
    OpenApiTypes.INT,
    OpenApiParameter.HEADER,
    response=[429],
    description="Seconds after which the project's provider calls have a free slot.",
)


class SessionApiView(ApiView):
    def project_of(self, request: Request, project_id: str | None, *, write: bool) -> Project:
        key = self.key(request)
        if project_id is None:
            if key.project_id is None:
                raise InvalidRequest("projectId is required for keys that reach every project.")
            project_id = key.project_id
        return self.project(request, project_id, write=write)

    def session(self, request: Request, session_id: str, *, write: bool = False) -> Session:
        return session_services.session_get(
            session_id=session_id, key=self.key(request), write=write
        )


def _session_body(session: Session) -> dict[str, Any]:
    return sessions_dicts([session])[0]


class SessionListView(SessionApiView):
    @extend_schema(
        parameters=[
            ENVIRONMENT,
            PROJECT_ID,
            OpenApiParameter("agent", OpenApiTypes.STR, OpenApiParameter.QUERY),
            OpenApiParameter(
                "status", OpenApiTypes.STR, OpenApiParameter.QUERY, enum=["active", "ended"]
            ),
            CURSOR,
        ],
        responses={200: s.SessionPageOutput, **ERRORS},
        operation_id="sessions_list",
    )
    def get(self, request: Request) -> Response:
        project = self.project_of(request, require_query_string(request, "projectId"), write=False)
        sessions, next_cursor = session_services.session_list(
            project=project,
            environment=self.environment(request),
            agent=require_query_string(request, "agent"),
            status=require_query_string(request, "status"),
            cursor=self.cursor(request),
        )
        return Response({"sessions": sessions_dicts(sessions), "nextCursor": next_cursor})

    @extend_schema(
        parameters=[IDEMPOTENCY_KEY],
        request=s.SessionCreateSchema,
        responses={
            200: OpenApiResponse(s.SessionCreateOutput, description="The key's existing session."),
            201: s.SessionCreateOutput,
            **ERRORS,
            409: _error("idempotency_conflict"),
        },
        operation_id="sessions_create",
        description="Bindings that fail admission are 400 invalid_memory_binding, naming the "
        "binding in error.details.binding.",
    )
    def post(self, request: Request) -> Response:
        data = validated(s.SessionCreateInput, request)
        project = self.project_of(request, data.get("projectId"), write=True)
        session, created = session_services.session_create(
            project=project,
            agent_id=data["agentId"],
            deployment_id=data.get("deploymentId"),
            memory=data.get("memory"),
            labels=data.get("labels"),
            idempotency_key=request.META.get("HTTP_IDEMPOTENCY_KEY", ""),
            actor=self.actor(request),
        )
        body = {
            "session": _session_body(session),
            "deployment": deployments_dicts([session.deployment])[0],
        }
        return Response(body, status=201 if created else 200)


class SessionDetailView(SessionApiView):
    @extend_schema(responses={200: s.SessionOutput, **ERRORS}, operation_id="sessions_retrieve")
    def get(self, request: Request, session_id: str) -> Response:
        return Response(_session_body(self.session(request, session_id)))


class SessionEndView(SessionApiView):
    @extend_schema(
        request=None,
        responses={200: s.SessionOutput, **ERRORS},
        operation_id="sessions_end",
        description="Revokes the session's memory writes at once. Ending an ended session "
        "returns it unchanged.",
    )
    def post(self, request: Request, session_id: str) -> Response:
        session = self.session(request, session_id, write=True)
        ended = session_services.session_end(session=session, actor=self.actor(request))
        return Response(_session_body(ended))


class SessionEventsView(SessionApiView):
    @extend_schema(
        parameters=[
            OpenApiParameter(
                "after",
                OpenApiTypes.INT,
                OpenApiParameter.QUERY,
                description="Return events with a seq above this (default 0).",
            )
        ],
        responses={200: s.EventPageOutput, **ERRORS},
        operation_id="sessions_events",
    )
    def get(self, request: Request, session_id: str) -> Response:
        session = self.session(request, session_id)
        after = session_services.check_after(request.query_params.get("after", "0"))
        limit = session_services.EVENT_PAGE_SIZE
        events = session_services.session_events(session=session, after=after, limit=limit)
        next_after = events[-1].seq if len(events) == limit else None
        return Response({"events": [event_dict(e) for e in events], "nextAfter": next_after})


class SessionRevertView(SessionApiView):
    @extend_schema(
        request=s.RevertInput,
        responses={200: s.RevertOutput, **ERRORS},
        operation_id="sessions_revert",
        description="Undoes everything the session wrote: for each document it changed, the "
        "version before its first write becomes current again (a new conditional version) "
        "unless others changed the document since; those are listed as conflicts with the "
        "merged text instead. `dryRun` shows the plan and writes nothing.",
    )
    def post(self, request: Request, session_id: str) -> Response:
        # Whether the key reaches the session before the body; whether it may write after,
        # as the body says whether the revert writes.
        session = self.session(request, session_id)
        data = validated(s.RevertInput, request)
        dry_run = bool(data["dryRun"])
        if not dry_run:
            key_may_act(key=self.key(request), project_id=session.project_id, write=True)
        plan = session_revert(session=session, dry_run=dry_run, actor=self.actor(request))
        return Response(plan.as_dict())


class SessionRecallsView(SessionApiView):
    @extend_schema(
        parameters=[CURSOR],
        responses={200: s.RecallPageOutput, **ERRORS},
        operation_id="sessions_recalls",
        description="What the model was given: the session's recalls, newest first, each "
        "with the projection of every bound resource and the revisions it showed.",
    )
    def get(self, request: Request, session_id: str) -> Response:
        session = self.session(request, session_id)
        recalls, next_cursor = recall_list(session=session, cursor=self.cursor(request))
        return Response(
            {"recalls": [recall_record_dict(r) for r in recalls], "nextCursor": next_cursor}
        )


class RecallView(SessionApiView):
    # The key, the session, its bindings and documents in one round trip (api/auth.py).
    reads_session_with_key = "documents"

    @extend_schema(
        request=s.RecallInput,
        responses={
            200: s.RecallOutput,
            **ERRORS,
            409: _error(
                "recall_failed (details: resource, reason; reason erasure, retryable: "
                "erasures of the project committed while it was made), session_closed, or "
                "idempotency_conflict (a requestId reused with another body)"
            ),
            429: _error(
                "recall_failed (details: resource, reason concurrency_limit, retryAfter): "
                "the project's provider calls are at their cap; nothing was sent"
            ),
        },
        parameters=[RETRY_AFTER],
        operation_id="sessions_recall",
        description="Recalls every bound resource before a model request. `use` selects the "
        "resources whose tools the request offers; 400 not_bound for one that is not bound.",
    )
    def post(self, request: Request, session_id: str) -> Response:
        session, bindings = session_services.session_get_with_bindings(
            session_id=session_id,
            key=self.key(request),
            write=True,
            lookup=getattr(request, "session_lookup", None),
        )
        data = validated(s.RecallInput, request)
        # A client that goes away cancels its provider calls, where the server can see it.
        with caller_connection(client_gone_probe(request)):
            body = runtime.recall_create(
                session=session,
                use=data.get("use", []),
                input_text=(data.get("input") or {}).get("text"),
                request_id=data.get("requestId"),
                bindings=bindings,
            )
        return Response(body)


class CancelView(SessionApiView):
    @extend_schema(
        request=s.CancelInput,
        responses={
            202: s.CancelOutput,
            **ERRORS,
            503: _error("service_unavailable: the shared cache cannot carry the cancellation"),
        },
        operation_id="sessions_cancel",
        description="Cancels an in-flight recall (by the requestId it was sent with) or tool "
        "call (by its callId), on whichever instance runs it. Its provider attempts stop; the "
        "recall fails with reason cancelled, the tool call's result is "
        '`{"status": "cancelled"}`, and a cancelled non-idempotent write becomes an open '
        "operation. Cancelling what already ended changes nothing.",
    )
    def post(self, request: Request, session_id: str) -> Response:
        session = self.session(request, session_id, write=True)
        data = validated(s.CancelInput, request)
        runtime.call_cancel(
            session=session, request_id=data.get("requestId"), call_id=data.get("callId")
        )
        return Response({"status": "requested"}, status=202)


class ToolCallView(SessionApiView):
    # The key, the session and its bindings in one round trip (api/auth.py).
    reads_session_with_key = "bindings"

    @extend_schema(
        request=s.ToolCallInput,
        responses={
            200: s.ToolCallOutput,
            **ERRORS,
            429: _error(
                "provider_failed (details: reason concurrency_limit, retryAfter): the "
                "project's provider calls are at their cap; nothing was sent"
            ),
        },
        parameters=[RETRY_AFTER],
        operation_id="sessions_tool_call",
        description="Runs a memory tool call of the model. Outcomes the model can act on "
        "(saved, conflict, rejected, ...) are 200 results; malformed arguments are 400 "
        "invalid_tool_arguments.",
    )
    def post(self, request: Request, session_id: str) -> Response:
        session, bindings = session_services.session_get_with_bindings(
            session_id=session_id,
            key=self.key(request),
            write=True,
            lookup=getattr(request, "session_lookup", None),
            with_documents=False,
        )
        data = validated(s.ToolCallInput, request)
        with caller_connection(client_gone_probe(request)):
            result = runtime.tool_call(
                session=session,
                bindings=bindings,
                recall_id=data["recallId"],
                call_id=data["callId"],
                name=data["name"],
                arguments=data.get("arguments", {}),
            )
        return Response({"result": result})
