"""The Sessions page: an environment's agent sessions, one session with its events, ending one."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_http_methods

from memoryadmin.agents.models import SessionStatus
from memoryadmin.agents.representations import event_dict, sessions_dicts
from memoryadmin.agents.services.operations import operations_unsettled
from memoryadmin.agents.services.provenance import recall_list
from memoryadmin.agents.services.reverts import CONFLICT, RESTORE, session_revert
from memoryadmin.agents.services.sessions import check_after, session_end, session_events
from memoryadmin.agents.services.sessions import session_list as sessions_page
from memoryadmin.core.diff import text_diff
from memoryadmin.web.services.roles import EDIT, READ, SESSION_END
from memoryadmin.web.services.sessions import session_in_environment
from memoryadmin.web.views.base import (
    Page,
    actor,
    page_render,
    project_view,
    show_once,
    take_once,
)

FILTER_MAX = 64


@require_GET
@project_view(READ, agents=True)
def session_list(request: HttpRequest, page: Page) -> HttpResponseBase:
    agent = request.GET.get("agent", "").strip()[:FILTER_MAX]
    status = request.GET.get("status", "").strip()[:FILTER_MAX]
    cursor = request.GET.get("cursor") or None
    rows, next_cursor = sessions_page(
        project=page.project,
        environment=page.environment,
        agent=agent or None,
        status=status or None,
        cursor=cursor,
    )
    context = {
        # The models give the times, the representations the live memory arrays.
        "rows": list(zip(rows, sessions_dicts(rows), strict=True)),
        "next_cursor": next_cursor,
        "agent": agent,
        "status": status,
        "cursor": cursor,
        "statuses": SessionStatus.values,
        "agents": [] if cursor else page.project_agents(),
    }
    # htmx: the filter swaps the table body, "load more" swaps itself for the next rows.
    partial = "more" if cursor else "results"
    return page_render(request, "memoryadmin/sessions.html", page, context, partial=partial)


@require_GET
@project_view(READ)
def session_detail(request: HttpRequest, page: Page, s: str) -> HttpResponseBase:
    session = session_in_environment(
        project=page.project, environment=page.environment, session_id=s
    )
    after = check_after(request.GET.get("after", "0"))
    events = session_events(session=session, after=after)
    # Events are numbered without gaps: more exist when the last shown is not the newest.
    next_after = events[-1].seq if events and events[-1].seq < session.last_seq else None
    context = {
        "session": session,
        "data": sessions_dicts([session])[0],
        # Open operations and dead letters: what is still unsettled at the providers.
        "operations": operations_unsettled(
            project=page.project, environment=page.environment, session_id=session.id
        ),
        "events": [(event, event_dict(event)) for event in events],
        # What the model was given: the newest recalls (the API pages through all of them).
        "recalls": recall_list(session=session)[0] if not after else [],
        "next_after": next_after,
        "after": after,
    }
    return page_render(
        request,
        "memoryadmin/session.html",
        page,
        context,
        partial="more-events" if after else None,
    )


@require_http_methods(["GET", "POST"])
@project_view(SESSION_END)
def session_end_confirm(request: HttpRequest, page: Page, s: str) -> HttpResponseBase:
    session = session_in_environment(
        project=page.project, environment=page.environment, session_id=s
    )
    if request.method == "GET":
        context = {"session": session, "data": sessions_dicts([session])[0]}
        return page_render(request, "memoryadmin/session_end.html", page, context, partial="dialog")
    was_active = session.is_active
    ended = session_end(session=session, actor=actor(request))
    if was_active:
        messages.success(
            request, f"Ended {ended.id}: agent saves through it are refused from now on."
        )
    else:
        messages.info(request, f"{ended.id} had already ended.")
    return redirect("web:session", page.project.id, page.environment, ended.id)


@require_http_methods(["GET", "POST"])
@project_view(EDIT)
def session_revert_page(request: HttpRequest, page: Page, s: str) -> HttpResponseBase:
    """GET: the plan (a dry run), or right after the POST what it did. POST: apply the
    plan, then redirect to what happened (a reload applies nothing again)."""
    session = session_in_environment(
        project=page.project, environment=page.environment, session_id=s
    )
    if request.method == "POST":
        plan = session_revert(session=session, dry_run=False, actor=actor(request))
        outcome = [
            {
                "resource": item.document.resource.resource_id,
                "doc_id": item.document.doc_id,
                "deleted": item.document.deleted,
                "action": item.action,
                "restore_revision": item.restore_revision,
                "written_revision": item.written_revision,
            }
            for item in plan.items
        ]
        show_once(request, page, f"revert-{session.id}", {"items": outcome})
        return redirect("web:session-revert", page.project.id, page.environment, session.id)
    done = take_once(request, page, f"revert-{session.id}")
    if done is not None:
        items = done["items"]
        context = {
            "session": session,
            "outcome": True,
            "done": items,
            "reverted": sum(item["action"] == RESTORE for item in items),
        }
        return page_render(request, "memoryadmin/session_revert.html", page, context)
    plan = session_revert(session=session, dry_run=True, actor=actor(request))
    rows = [
        (item, text_diff(item.document.text, item.merged or item.before_text))
        if item.action == CONFLICT
        else (item, None)
        for item in plan.items
    ]
    context = {
        "session": session,
        "plan": plan,
        "items": rows,
        # Offered only when something would be restored.
        "restores": any(item.action == RESTORE for item in plan.items),
    }
    return page_render(request, "memoryadmin/session_revert.html", page, context)
