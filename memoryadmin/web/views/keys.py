"""The Keys page (owners): a project's API keys, create (the secret shown once),
revoke with confirmation, and the project's people who are locked out of logging in."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from memoryadmin.memory.models import ApiKey
from memoryadmin.memory.services.key_usage import USAGE_HOURS, key_usage
from memoryadmin.memory.services.keys import (
    api_key_create,
    api_key_get,
    api_key_list,
    api_key_revoke,
)
from memoryadmin.web.forms import ApiKeyForm
from memoryadmin.web.services.lockouts import lockouts_for_project
from memoryadmin.web.services.roles import KEYS
from memoryadmin.web.views.base import (
    INVALID,
    Page,
    actor,
    never_cached,
    page_render,
    project_view,
    show_once,
    take_once,
)

# The usage chart's size (SVG user units): one bar per hour.
BAR_WIDTH, CHART_HEIGHT = 6, 30

# How long a revoked key stays on the page (the API and `manage.py apikey list` list all).
REVOKED_SHOWN = timedelta(days=30)


def usage_rows(keys: list[ApiKey]) -> list[dict[str, Any]]:
    """Each key's last day: totals, and bars of requests per hour drawn on the server
    (errors and 429s stacked over the rest)."""
    usage = key_usage(keys=keys)
    peak = max((h.requests for hours in usage.values() for h in hours), default=0) or 1
    rows = []
    for key in keys:
        hours = usage[key.pk]
        bars = []
        for index, hour in enumerate(hours):
            height = round(CHART_HEIGHT * hour.requests / peak)
            bad = round(CHART_HEIGHT * (hour.errors + hour.throttled) / peak)
            bars.append(
                {
                    "x": index * BAR_WIDTH,
                    "y": CHART_HEIGHT - height,
                    "height": height,
                    "bad_y": CHART_HEIGHT - bad,
                    "bad": bad,
                    "hour": hour,
                }
            )
        rows.append(
            {
                "key": key,
                "requests": sum(h.requests for h in hours),
                "errors": sum(h.errors for h in hours),
                "throttled": sum(h.throttled for h in hours),
                "bars": bars,
            }
        )
    return rows


def _render(
    request: HttpRequest, page: Page, form: ApiKeyForm, *, status: int = 200, **extra: Any
) -> HttpResponseBase:
    # Keys in use and those revoked lately; older ones stay listed by the API and the CLI.
    since = timezone.now() - REVOKED_SHOWN
    keys = list(api_key_list(project_id=page.project.id, revoked_since=since))
    made = extra.pop("made", None)
    if made is not None:  # right after "Create key": the new key and its secret
        extra["new_key"] = next((key for key in keys if key.pk == made["pk"]), None)
        extra["secret"] = made["secret"]
    context = {
        "keys": keys,
        "revoked_shown_days": REVOKED_SHOWN.days,
        "usage": usage_rows(keys),
        "lockouts": lockouts_for_project(project=page.project),
        "usage_hours": USAGE_HOURS,
        "chart_width": USAGE_HOURS * BAR_WIDTH,
        "chart_height": CHART_HEIGHT,
        "form": form,
        **extra,
    }
    return page_render(request, "memoryadmin/keys.html", page, context, status=status)


@require_GET
@project_view(KEYS)
def key_list(request: HttpRequest, page: Page) -> HttpResponseBase:
    made = take_once(request, page, "key")
    response = _render(request, page, ApiKeyForm(), made=made)
    return never_cached(response) if made else response


@require_POST
@project_view(KEYS)
def key_create(request: HttpRequest, page: Page) -> HttpResponseBase:
    form = ApiKeyForm(request.POST)
    if not form.is_valid():
        return _render(request, page, form, status=INVALID)
    key, secret = api_key_create(
        project_id=page.project.id,
        read_only=form.cleaned_data["read_only"],
        name=form.cleaned_data["name"],
        actor=actor(request),
    )
    # Shown by the page this redirects to, once: a reload makes no second key.
    show_once(request, page, "key", {"pk": key.pk, "secret": secret})
    return redirect("web:keys", page.project.id, page.environment)


@require_http_methods(["GET", "POST"])
@project_view(KEYS)
def key_revoke(request: HttpRequest, page: Page, k: int) -> HttpResponseBase:
    key = api_key_get(ref=str(k), project_id=page.project.id, scoped=True)
    if request.method == "GET":
        return page_render(
            request, "memoryadmin/key_revoke.html", page, {"key": key}, partial="dialog"
        )
    was_revoked = key.revoked_at is not None
    key = api_key_revoke(key=key, actor=actor(request))
    if was_revoked:
        messages.info(request, f"{key.prefix}… was already revoked.")
    else:
        messages.success(request, f"Revoked {key.prefix}…: requests with it are refused now.")
    return redirect("web:keys", page.project.id, page.environment)
