"""The API's base view, shared parameters and error schemas, for every app's API views."""

from __future__ import annotations

import functools
from typing import Any, NoReturn

from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.template.response import SimpleTemplateResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.views import APIView

from memoryadmin.api import serializers as s
from memoryadmin.core.environments import Environment, check_environment
from memoryadmin.core.queries import given_once_check
from memoryadmin.memory.models import ApiKey, Document, Project, Resource
from memoryadmin.memory.services import deployments as deployment_services
from memoryadmin.memory.services import documents as document_services
from memoryadmin.memory.services.keys import ResourceLookup
from memoryadmin.memory.services.projects import key_may_act, project_for_key

ENVIRONMENT = OpenApiParameter(
    "environment",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    required=True,
    enum=Environment.values,
    description="Every memory route names its environment.",
)
CURSOR = OpenApiParameter(
    "cursor", OpenApiTypes.STR, OpenApiParameter.QUERY, description="nextCursor of the last page."
)
ERRORS = {
    code: OpenApiResponse(s.ErrorOutput, description=text)
    for code, text in {
        400: "invalid_request",
        401: "unauthorized",
        403: "forbidden",
        404: "not_found / project_not_found",
        # Every request with a key counts in its key's and its project's windows.
        429: "rate_limited",
    }.items()
}
WRITE_ERRORS = {
    **ERRORS,
    412: OpenApiResponse(s.ErrorOutput, description="precondition_failed"),
    413: OpenApiResponse(s.ErrorOutput, description="memory_limit_exceeded"),
    428: OpenApiResponse(s.ErrorOutput, description="precondition_required"),
}


_ALLOW: dict[type, str] = {}


@functools.cache
def _shared(classes: tuple[type, ...]) -> tuple[Any, ...]:
    return tuple(cls() for cls in classes)


def _unlink_rendered(response: HttpResponseBase) -> HttpResponseBase:
    """Once DRF's response is rendered, its context (the view, which holds the response)
    is no longer read."""
    response.renderer_context = None  # type: ignore[attr-defined]
    return response


class ApiView(APIView):
    # DRF instantiates its renderers, parsers, authenticators and permissions per
    # request; theirs hold no state, so each view class shares one of each.
    # Throttles keep per-request state (the wait) and stay per request.

    # A request leaves no reference cycle behind, so that it and all it read are freed
    # when it ends, not by the garbage collector's passes (one every 15 to 40 requests,
    # 400 to 500 us each; tests/test_reference_cycles.py). Django and DRF made three:
    # the view holding its own bound `get` as `head`, DRF's request holding its parser
    # context (which holds the request and the view), and a DRF response's context
    # holding the view (which holds the response).

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Django's View.setup sets `self.head = self.get` on every instance without one.
        if hasattr(cls, "get") and not hasattr(cls, "head"):
            cls.head = cls.get  # type: ignore[attr-defined]

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            return super().dispatch(request, *args, **kwargs)
        finally:
            drf_request = getattr(self, "request", None)
            if isinstance(drf_request, Request):
                drf_request.parser_context = None  # type: ignore[assignment]  # read no more

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        response = super().finalize_response(request, response, *args, **kwargs)
        if isinstance(response, SimpleTemplateResponse) and not response.is_rendered:
            response.add_post_render_callback(_unlink_rendered)
        return response

    def get_renderers(self) -> list[Any]:
        return list(_shared(tuple(self.renderer_classes)))

    def get_parsers(self) -> list[Any]:
        return list(_shared(tuple(self.parser_classes)))

    def get_authenticators(self) -> list[Any]:
        return list(_shared(tuple(self.authentication_classes)))

    def get_permissions(self) -> list[Any]:
        return list(_shared(tuple(self.permission_classes)))

    # The query parameters this route takes more than once; any other given twice is 400.
    repeatable_query: frozenset[str] = frozenset()

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        """DRF's (key, permission, rate), then whether the key reaches the project the path
        names: a key of another project is refused (403) before its body or any id is
        read, as on every route, including those whose body says whether they write.
        Then the query: a parameter given twice, unless the route repeats it, is 400
        before any is read (the last value would win otherwise)."""
        super().initial(request, *args, **kwargs)
        project_id = kwargs.get("p")
        if isinstance(project_id, str) and isinstance(request.auth, ApiKey):
            key_may_act(key=request.auth, project_id=project_id, write=False)
        given_once_check(request.query_params, repeatable=self.repeatable_query)

    def permission_denied(
        self, request: Request, message: str | None = None, code: str | None = None
    ) -> NoReturn:
        """DRF's, with the permission's message on a 401 too (DRF's own words there,
        "Authentication credentials were not provided.", do not say which header)."""
        if request.authenticators and not request.successful_authenticator:
            raise exceptions.NotAuthenticated(detail=message, code=code)
        super().permission_denied(request, message, code)

    @property
    def default_response_headers(self) -> dict[str, str]:
        allow = _ALLOW.get(type(self))
        if allow is None:  # DRF's header, the same for every instance of a class
            allow = _ALLOW[type(self)] = ", ".join(self.allowed_methods)
        headers = {"Allow": allow}
        if len(self.renderer_classes) > 1:
            headers["Vary"] = "Accept"
        return headers

    def rendered(
        self,
        request: Request,
        data: Any,
        *,
        status: int = 200,
        headers: dict[str, str] | None = None,
    ) -> HttpResponse:
        """`Response(data, status=status, headers=headers)` as DRF renders it for this
        request (its negotiated renderer and media type), rendered here: the same body
        and headers, without a template response to render later (a hot path's answer)."""
        renderer = request.accepted_renderer
        media_type, charset = renderer.media_type, renderer.charset
        body = renderer.render(data, request.accepted_media_type, self.get_renderer_context())
        content_type = media_type if charset is None else f"{media_type}; charset={charset}"
        return HttpResponse(body, status=status, content_type=content_type, headers=headers)

    def key(self, request: Request) -> ApiKey:
        assert isinstance(request.auth, ApiKey)
        return request.auth

    def actor(self, request: Request) -> str:
        return f"key:{self.key(request).prefix}"

    def project(self, request: Request, p: str, *, write: bool = False) -> Project:
        return project_for_key(key=self.key(request), project_id=p, write=write)

    def environment(self, request: Request) -> Environment:
        # Given once: ApiView.initial refused it repeated.
        return check_environment(request.query_params.get("environment"))

    def resource(self, request: Request, p: str, r: str, *, write: bool = False) -> Resource:
        lookup = getattr(request, "resource_lookup", None)
        if isinstance(lookup, ResourceLookup) and (lookup.project_id, lookup.resource_id) == (p, r):
            resource = deployment_services.resource_for_key(
                key=self.key(request), lookup=lookup, write=write
            )
        else:
            project = self.project(request, p, write=write)
            environment = self.environment(request)
            resource = deployment_services.resource_get(
                project=project, environment=environment, resource_id=r
            )
        return deployment_services.resource_documents_check(resource)

    def document(self, request: Request, resource: Resource, doc_id: str) -> Document:
        """The live document of `resource` (of `self.resource`), as read with the key
        when the view `reads_document_with_key` on GET."""
        lookup = getattr(request, "resource_lookup", None)
        if isinstance(lookup, ResourceLookup) and (
            lookup.resource is resource and lookup.doc_id == doc_id
        ):
            return document_services.document_get(
                resource=resource, doc_id=doc_id, read=lookup.document
            )
        return document_services.document_get(resource=resource, doc_id=doc_id)

    def cursor(self, request: Request) -> str | None:
        return s.require_query_string(request, "cursor")
