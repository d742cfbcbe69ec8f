"""What every Memory page view shares: the project door, page context and error pages."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any, Concatenate
from urllib.parse import urlsplit

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import render, resolve_url
from django.utils.cache import add_never_cache_headers, patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django_htmx.http import HttpResponseClientRedirect

from memoryadmin.core.environments import Environment
from memoryadmin.core.errors import DomainError
from memoryadmin.core.queries import given_once_check
from memoryadmin.core.users import user_settled
from memoryadmin.memory.models import Project, Resource
from memoryadmin.memory.services.deployments import resource_documents_check, resource_get
from memoryadmin.memory.services.rate_limits import page_request_count
from memoryadmin.web.auth import users_read_with
from memoryadmin.web.services.roles import (
    CONTAIN,
    DELETE,
    DEPLOY,
    EDIT,
    ERASE,
    ERASE_PREVIEW,
    EXPORT,
    FREEZE,
    INCIDENTS,
    KEYS,
    OPERATIONS,
    PEOPLE,
    REVIEW,
    SECRETS,
    SESSION_END,
    WEBHOOKS,
    Membership,
    PageRead,
    membership_in,
    membership_require,
    memberships_and_resource,
    memberships_for_user,
)
from memoryadmin.web.services.sessions import session_agents

# A form that does not validate is shown again, with its errors, under this status.
INVALID = 422


@dataclass(frozen=True)
class Page:
    """The project, environment and role a request acts in."""

    membership: Membership
    environment: Environment
    # Every project of the user (the project switcher), read with the role.
    memberships: tuple[Membership, ...] = ()
    # The resource the URL names, read with the role (None: not read, or none).
    named: Resource | None = None
    # The project's agents, read with the role when the view asked (None: not read).
    agents: tuple[str, ...] | None = None

    @property
    def project(self) -> Project:
        return self.membership.project

    @property
    def role(self) -> str:
        return self.membership.role

    # Templates show only what the role may do; the views check again on every request.
    @property
    def can_edit(self) -> bool:
        return self.membership.can(EDIT)

    @property
    def can_delete(self) -> bool:
        return self.membership.can(DELETE)

    @property
    def can_freeze(self) -> bool:
        return self.membership.can(FREEZE)

    @property
    def can_export(self) -> bool:
        return self.membership.can(EXPORT)

    @property
    def can_end_sessions(self) -> bool:
        return self.membership.can(SESSION_END)

    @property
    def can_handle_operations(self) -> bool:
        return self.membership.can(OPERATIONS)

    @property
    def can_manage_keys(self) -> bool:
        return self.membership.can(KEYS)

    @property
    def can_manage_people(self) -> bool:
        return self.membership.can(PEOPLE)

    @property
    def can_deploy(self) -> bool:
        return self.membership.can(DEPLOY)

    @property
    def can_manage_secrets(self) -> bool:
        return self.membership.can(SECRETS)

    @property
    def can_review(self) -> bool:
        return self.membership.can(REVIEW)

    @property
    def can_manage_webhooks(self) -> bool:
        return self.membership.can(WEBHOOKS)

    @property
    def can_open_incidents(self) -> bool:
        return self.membership.can(INCIDENTS)

    @property
    def can_contain(self) -> bool:
        return self.membership.can(CONTAIN)

    @property
    def can_preview_erasures(self) -> bool:
        return self.membership.can(ERASE_PREVIEW)

    @property
    def can_erase(self) -> bool:
        return self.membership.can(ERASE)

    @property
    def production(self) -> bool:
        return self.environment == Environment.PRODUCTION

    def project_agents(self) -> list[str]:
        """The agents with a deployment in the project (the agent filter's choices)."""
        if self.agents is not None:
            return list(self.agents)
        return session_agents(project=self.project)

    def resource(self, resource_id: str, *, documents: bool = True) -> Resource:
        """A resource of this environment; with `documents`, one that keeps documents here."""
        named = self.named
        if named is not None and named.resource_id == resource_id:
            resource = named  # of this project and environment: read with the role
        else:
            resource = resource_get(
                project=self.project, environment=self.environment, resource_id=resource_id
            )
        if documents:
            resource_documents_check(resource, hint="its records live with the provider, not here.")
        return resource


ProjectView = Callable[Concatenate[HttpRequest, Page, ...], HttpResponseBase]


def is_partial(request: HttpRequest) -> bool:
    """An htmx request that swaps part of a page (a history restore wants the whole page)."""
    htmx = getattr(request, "htmx", None)
    return htmx is not None and bool(htmx) and not htmx.history_restore_request


def actor(request: HttpRequest) -> str:
    return f"user:{request.user.get_username()}"


def login_redirect(request: HttpRequest) -> HttpResponseBase:
    if getattr(request, "htmx", False):
        # A partial swap would put the login form inside the page: reload instead.
        login = resolve_url("web:login")
        path = request.htmx.current_url_abs_path or request.get_full_path()  # type: ignore[attr-defined]
        return HttpResponseClientRedirect(f"{login}?{urlencode({'next': path})}")
    if request.method in ("GET", "HEAD"):
        return redirect_to_login(request.get_full_path())
    # A form sent once the login had expired: after logging in, back to the page the form
    # was on. The form's own address answers its POST only: a GET there is a 405.
    return redirect_to_login(_referring_page(request) or resolve_url("web:home"))


def _referring_page(request: HttpRequest) -> str | None:
    """The path and query of the page that sent the request, when it is one of this site's."""
    referer = request.headers.get("Referer", "")
    if not url_has_allowed_host_and_scheme(
        referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return None
    parts = urlsplit(referer)
    if not parts.netloc:
        return None
    return parts.path + (f"?{parts.query}" if parts.query else "")


# The further permission a request asks for, read from its method and fields alone (None:
# none beyond the view's own).
Asks = Callable[[HttpRequest], str | None]


def project_view(
    permission: str,
    *,
    agents: bool = False,
    asks: Asks | None = None,
    repeatable_query: frozenset[str] = frozenset(),
) -> Callable[[ProjectView], Callable[..., HttpResponseBase]]:
    """Resolves the user's role on the project in the URL and demands `permission`, then
    what `asks` says this request needs (erasing rather than previewing, deleting rather
    than freezing...). Then the query, as the API's: a parameter given twice, unless the
    view takes it repeated (`repeatable_query`), is a 400 page before the view reads any
    (the last value would win otherwise).

    No role on the project: 404, as for a project that does not exist.
    A role without the permission: 403, and the view never runs: it reads and changes
    nothing.
    The signed-in user is read with the role, the project switcher, the resource the
    URL names (if it does) and, with `agents`, the project's agents for full pages
    (`Page.project_agents`): one query after the session's.
    """

    def decorate(view: ProjectView) -> Callable[..., HttpResponseBase]:
        @wraps(view)
        def wrapped(
            request: HttpRequest, p: str, e: Environment, **kwargs: Any
        ) -> HttpResponseBase:
            named_id = kwargs.get("r") if isinstance(kwargs.get("r"), str) else None
            read = PageRead(
                project_id=p,
                environment=e,
                resource_id=named_id,
                with_agents=agents and not is_partial(request),
            )
            with users_read_with(read):
                if not request.user.is_authenticated:
                    return login_redirect(request)
            user_settled(request)  # read: the page and its template use it as itself
            page: Page | None = None
            membership: Membership | None = None
            try:
                named = None
                if read.user is not None and read.user.pk == request.user.pk:
                    memberships, named = read.memberships, read.named
                elif named_id is not None:
                    # The user was read before (not by this door): one query for the
                    # role, the project switcher and the resource the URL names.
                    memberships, named = memberships_and_resource(
                        user=request.user, project_id=p, environment=e, resource_id=named_id
                    )
                else:
                    memberships = memberships_for_user(user=request.user)
                try:
                    membership = membership_in(memberships=memberships, project_id=p)
                finally:
                    # In the person's window, and in the project's once they have a role
                    # on it: pages of a project one has no role on never spend its window.
                    page_request_count(
                        user_id=request.user.pk, project_id=None if membership is None else p
                    )
                # Known from here on: error pages keep the project's navigation and role.
                page = Page(
                    membership=membership,
                    environment=e,
                    memberships=tuple(memberships),
                    named=named,
                    agents=None if read.agents is None else tuple(read.agents),
                )
                membership_require(membership=membership, permission=permission)
                asked = None if asks is None else asks(request)
                if asked is not None:
                    membership_require(membership=membership, permission=asked)
                given_once_check(request.GET, repeatable=repeatable_query)
                response = view(request, page, **kwargs)
            except DomainError as exc:
                response = error_page(request, exc, page=page)
            # Full pages and htmx fragments share URLs: caches must tell them apart.
            patch_vary_headers(response, ["HX-Request"])
            return response

        return wrapped

    return decorate


def page_render(
    request: HttpRequest,
    template: str,
    page: Page | None,
    context: dict[str, Any],
    *,
    partial: str | None = None,
    status: int = 200,
) -> HttpResponse:
    """Renders a page, or only `partial` of it for htmx swaps."""
    context = {**context, "page": page}
    if page is not None:
        context.update(p=page.project.id, e=page.environment)
    if partial is not None and is_partial(request):
        return render(request, f"{template}#{partial}", context, status=status)
    # The project switcher: only full pages need it.
    if page is not None and page.memberships:
        context["memberships"] = list(page.memberships)
    else:
        context["memberships"] = memberships_for_user(user=request.user)
    return render(request, template, context, status=status)


def unavailable_page(
    request: HttpRequest, headers: dict[str, str], *, took_too_long: bool = False
) -> HttpResponse:
    """The 503 page while the database cannot be reached, or when one of the request's
    statements ran past its bound (`took_too_long`): the site's layout, rendered without
    anything that needs the database (no user, roles, projects or messages)."""
    from django.contrib.auth.models import AnonymousUser

    what = (
        "The request took too long" if took_too_long else "The database cannot be reached right now"
    )
    context = {
        "status": 503,
        "message": f"{what}; try again in a few seconds.",
        "page": None,
        "user": AnonymousUser(),
        "messages": [],
        "memberships": [],
    }
    template = "memoryadmin/error.html#message" if is_partial(request) else "memoryadmin/error.html"
    response = render(request, template, context, status=503)
    for name, value in headers.items():
        response[name] = value
    return response


def error_page(
    request: HttpRequest, exc: DomainError, *, page: Page | None = None, **context: Any
) -> HttpResponse:
    response = page_render(
        request,
        "memoryadmin/error.html",
        page,
        {"status": exc.status, "message": exc.message, **context},
        partial="message",
        status=exc.status,
    )
    for name, value in exc.headers().items():
        response[name] = value
    return response


# Secrets shown once after a POST (a new key, a signing secret, an invitation): the POST
# keeps them in the session and redirects; the page that follows takes them out again,
# so a reload shows the page without them and repeats nothing (POST/redirect/GET). Kept
# under the page's project and environment: the same page of another project, open in
# another tab, neither shows nor consumes them.
_ONCE = "memoryadmin.once."


def _once_key(page: Page, name: str) -> str:
    return f"{_ONCE}{page.project.id}.{page.environment}.{name}"


def show_once(request: HttpRequest, page: Page, name: str, value: dict[str, Any]) -> None:
    request.session[_once_key(page, name)] = value


def take_once(request: HttpRequest, page: Page, name: str) -> dict[str, Any] | None:
    value = request.session.pop(_once_key(page, name), None)
    return value if isinstance(value, dict) else None


def never_cached(response: HttpResponseBase) -> HttpResponseBase:
    """A page showing a secret: never stored by a cache, never shown again from one."""
    add_never_cache_headers(response)
    return response
