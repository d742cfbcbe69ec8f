from __future__ import annotations

import functools
import json
from datetime import UTC, datetime, timedelta
from html import escape as _escape  # as Django's escape, without its lazy wrapper
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode
from zoneinfo import ZoneInfo

from django import template
from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.templatetags.static import static
from django.urls import NoReverseMatch, get_script_prefix, get_urlconf, reverse
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince, timeuntil
from django_htmx.jinja import htmx_script

from memoryadmin.memory.limits import utf8_len

register = template.Library()

_UTC_ZONE = ZoneInfo("UTC")  # ZoneInfo keeps one instance per key: the default zone's


def _needs_escape(value: str) -> bool:
    """Whether `html.escape` (quotes included) would change `value`."""
    return "&" in value or "<" in value or ">" in value or '"' in value or "'" in value


def _esc(value: str) -> str:
    """`html.escape` (quotes included), without its five passes over the text when
    it has nothing to escape, as most ids, titles and summaries have not."""
    return _escape(value) if _needs_escape(value) else value


@functools.lru_cache(maxsize=4096)
def _reversed(viewname: str, args: tuple[str, ...], prefix: str, urlconf: str) -> str:
    return reverse(viewname, args=args, urlconf=urlconf)


def cached_reverse(viewname: str, *args: Any, context: template.Context | None = None) -> str:
    """`reverse`, remembered per process: a page's header, tabs and list link to the
    same few URLs on every request (the script prefix and URLconf are in the key)."""
    prefix, urlconf = _url_env(context)
    return _reversed(viewname, tuple(str(arg) for arg in args), prefix, urlconf)


_URL_ENV = "memoryadmin.url_env"


def _url_env(context: template.Context | None) -> tuple[str, str]:
    """The script prefix and URLconf, read once per template render: both sit in
    thread-local storage that costs more to read than the cached link itself."""
    if context is not None:
        env = context.render_context.get(_URL_ENV)
        if env is not None:
            return env
    env = (get_script_prefix(), get_urlconf() or settings.ROOT_URLCONF)
    if context is not None:
        context.render_context[_URL_ENV] = env
    return env


@register.simple_tag(takes_context=True)
def link(context: template.Context, viewname: str, *args: Any) -> str:
    """`{% url %}` for the links every page repeats (see `cached_reverse`)."""
    return cached_reverse(viewname, *args, context=context)


def agent_session_url(
    project_id: str, environment: str, session_id: str, url_env: tuple[str, str]
) -> str:
    """The page of an agent session ("" for an id its route cannot name), remembered per
    process as `cached_reverse`: a list of agent writes links each row's session, and
    `reverse` costs tens of microseconds a call. `url_env`: the script prefix and URLconf."""
    if not session_id:
        return ""
    try:
        return _reversed("web:session", (project_id, environment, session_id), *url_env)
    except NoReverseMatch:
        return ""


@register.simple_tag(takes_context=True)
def session_url(
    context: template.Context, project_id: str, environment: str, session_id: str
) -> str:
    """The page of an agent session ("" for an id its route cannot name)."""
    return agent_session_url(
        str(project_id), str(environment), str(session_id or ""), _url_env(context)
    )


@register.filter
def utf8_bytes(value: Any) -> int:
    return utf8_len(str(value or "").replace("\r\n", "\n"))


@register.filter
def detail_items(detail: Any) -> list[tuple[str, str]]:
    """An audit entry's detail as (key, value) pairs, values flattened to text."""
    if not isinstance(detail, dict):
        return []
    items = []
    for key, value in detail.items():
        if isinstance(value, str):
            text = value
        elif isinstance(value, list) and all(isinstance(item, str) for item in value):
            text = ", ".join(value)
        else:  # numbers, booleans, null, nested data: as JSON writes them (false, not False)
            text = json.dumps(value, ensure_ascii=False)
        items.append((str(key), text))
    return items


# Units below a month, as timesince counts them (its strings, spaces kept from wrapping).
_AGO_UNITS = (
    (7 * 24 * 60 * 60, "week"),
    (24 * 60 * 60, "day"),
    (60 * 60, "hour"),
    (60, "minute"),
)
_MONTH_FREE_SECONDS = timedelta(days=28).total_seconds()
_MINUTE_SECONDS = 60.0


@register.filter
def ago(value: datetime, now: datetime | None = None) -> str:
    """A time in words from now: "3\xa0days ago", "in 7\xa0days", "just now"."""
    return _ago(value, now or timezone.now(), settings.USE_I18N)


def _ago(value: datetime, now: datetime, translated: bool, depth: int = 2) -> str:
    # In seconds (microseconds exact): the comparisons are those of the timedeltas.
    remaining = (now - value).total_seconds()
    future = remaining < 0
    if future:
        remaining = -remaining
    if remaining < _MINUTE_SECONDS:
        return "in under a minute" if future else "just now"
    if remaining >= _MONTH_FREE_SECONDS or translated:
        if future:
            return f"in {timeuntil(value, now, depth=depth)}"
        return f"{timesince(value, now, depth=depth)} ago"
    # Under 28 days no calendar month has passed: timesince's own arithmetic on
    # the remaining seconds (from the largest unit that counts, `depth` adjacent
    # units at most, stopping at the first that does not), without its lazy strings.
    if depth == 1:  # a list's column: the largest unit alone
        for chunk, unit in _AGO_UNITS:
            if remaining >= chunk:
                count = int(remaining // chunk)
                words = f"{count}\xa0{unit}" if count == 1 else f"{count}\xa0{unit}s"
                return f"in {words}" if future else f"{words} ago"
    parts: list[str] = []
    for chunk, unit in _AGO_UNITS:
        count = int(remaining // chunk)
        if not count:
            if parts:
                break
            continue
        remaining -= chunk * count
        parts.append(f"{count}\xa0{unit}" if count == 1 else f"{count}\xa0{unit}s")
        if len(parts) == depth:
            break
    words = ", ".join(parts)
    return f"in {words}" if future else f"{words} ago"


# Project-wide pages keep their section when the environment changes; pages of one
# document, resource or session (which exist per environment) go to the memory list.
ENV_SECTIONS = frozenset(
    {
        "inventory",
        "overview",
        "audit",
        "export",
        "erasures",
        "sessions",
        "incidents",
        "deployments",
        "keys",
        "people",
        "review",
        "webhooks",
    }
)


def env_section(url_name: str) -> str:
    """The section an environment tab links to: the page's own where it exists in every
    environment, else the inventory."""
    return url_name if url_name in ENV_SECTIONS else "inventory"


@register.filter
@functools.lru_cache(maxsize=1024)
def kib(value: int) -> str:
    """A size in bytes for people: "512 B", "3.2 KiB", "1.5 MiB"."""
    size = int(value or 0)
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size / (1024 * 1024):.1f} MiB"


@register.filter
def short_revision(value: str) -> str:
    return str(value)[:8]


SHORT_SESSION = 8  # "ses_" and four hex digits, as revisions show their first 8


def _short_session_html(session_id: str) -> str:
    """A session id cut to its first characters ("ses_4f2a" and an ellipsis), for narrow
    columns, as HTML."""
    if len(session_id) <= SHORT_SESSION + 1:
        return _escape(session_id)
    return _escape(session_id[:SHORT_SESSION]) + "&hellip;"


# The navigation tab of each page (by URL name); pages not listed are Memory pages.
SECTION_OF = {
    "overview": "overview",
    "audit": "audit",
    "export": "export",
    "erasures": "erasures",
    "erasure": "erasures",
    "erasure-receipt": "erasures",
    "sessions": "sessions",
    "session": "sessions",
    "session-end": "sessions",
    "session-revert": "sessions",
    "incidents": "incidents",
    "incident": "incidents",
    "incident-contain": "incidents",
    "incident-create": "incidents",
    "deployments": "deployments",
    "deployment": "deployments",
    "deployment-promote": "deployments",
    "secret-set": "deployments",
    "keys": "keys",
    "key-create": "keys",
    "key-revoke": "keys",
    "people": "people",
    "person-grant": "people",
    "person-invite": "people",
    "person-revoke": "people",
    "review": "review",
    "proposal": "review",
    "webhooks": "webhooks",
    "webhook": "webhooks",
    "webhook-create": "webhooks",
    "webhook-update": "webhooks",
    "webhook-rotate": "webhooks",
    "webhook-delete": "webhooks",
    "webhook-redeliver": "webhooks",
}


def nav_section(url_name: str) -> str:
    """The section tab a page highlights."""
    return SECTION_OF.get(url_name, "memory")


@register.filter
def provider_items(provider: Any) -> list[tuple[str, str]]:
    """A declaration's provider settings beyond kind and maxBytes, values as JSON."""
    if not isinstance(provider, dict):
        return []
    return [
        (str(key), value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
        for key, value in provider.items()
        if key not in ("kind", "maxBytes")
    ]


@register.filter
def get_item(mapping: Any, key: Any) -> Any:
    return mapping.get(key) if isinstance(mapping, dict) else None


@register.filter
def index(sequence: Any, position: int) -> Any:
    try:
        return sequence[int(position)]
    except (IndexError, TypeError, ValueError):
        return ""


# The cells every page shows of a write: who wrote it, when, and its size. Each is built
# here once; the page's templates use the tags (`{% writer %}`, `{% time %}`, `{% size %}`)
# and the document list's rows call the functions.


def writer_html(
    kind: str,
    session_id: str | None,
    project_id: str,
    environment: str,
    url_env: tuple[str, str],
    *,
    short: bool = False,
) -> str:
    """Owner, or the agent and its session; `short` (a list's column): the session by its
    first characters, the whole id on hover. `url_env` as `agent_session_url`'s."""
    if kind != "agent":
        return '<span class="writer writer-owner">owner</span>'
    return _agent_html(session_id or "", project_id, environment, url_env, short)


@functools.lru_cache(maxsize=4096)
def _agent_html(
    session_id: str, project_id: str, environment: str, url_env: tuple[str, str], short: bool
) -> str:
    """An agent's writer cell, remembered per process: a list's rows come from a few
    sessions."""
    writer = "agent"
    if session_id:
        url = agent_session_url(project_id, environment, session_id, url_env)
        shown = _short_session_html(session_id) if short else _escape(session_id)
        hover = f' title="{_escape(session_id)}"' if short else ""
        code = f"<code{hover}>{shown}</code>"
        writer += f' &middot; <a href="{_escape(url)}">{code}</a>' if url else f" &middot; {code}"
    return f'<span class="writer writer-agent">{writer}</span>'


@functools.lru_cache(maxsize=4096)
def _stamp(value: datetime, zone: Any) -> str:
    """`value` in `zone` as "2026-01-31T09:05:00.123456+00:00" (its date and time as
    strftime writes them), remembered per process: a list shows the same rows' times
    again and again, and `isoformat` costs about 0.75 us (a page of 50 rows: 2 % of it).
    Equal instants in other zones share an entry and give the same text in `zone`."""
    # A time read from the database is in UTC: shown in UTC, it needs no conversion.
    utc = zone is _UTC_ZONE and value.tzinfo is UTC
    return (value if utc else value.astimezone(zone)).isoformat()


def time_html(
    value: datetime, *, now: datetime, zone: Any, translated: bool, depth: int = 2
) -> str:
    """Relative, in `depth` units at most; the exact time on hover."""
    stamp = _stamp(value, zone)
    when = _ago(value, now, translated, depth)
    if translated:  # untranslated, the words are digits, letters and spaces: nothing to escape
        when = _escape(when)
    return f'<time datetime="{stamp}" title="{stamp[:10]} {stamp[11:19]} UTC">{when}</time>'


def size_html(size: int, max_bytes: int, *, compact: bool = False) -> str:
    """Bytes against the limit; `compact` (a list's column, its head names the limit)
    in KiB, the bytes on hover."""
    over = ' <span class="badge over">over limit</span>' if size > max_bytes else ""
    meter = f'<meter min="0" max="{max_bytes}" value="{size}" aria-hidden="true"></meter>'
    if compact:
        return (
            f'<span class="size" title="{size} of {max_bytes} bytes">'
            f"{meter} {kib(size)}{over}</span>"
        )
    return f'<span class="size">{meter} {size} / {max_bytes} bytes{over}</span>'


@register.simple_tag(takes_context=True)
def writer(
    context: template.Context, kind: str, session_id: str | None, origin: Any = None
) -> SafeString:
    project_id, environment = context.get("p") or "", context.get("e") or ""
    actor = str(origin.get("actor", "")) if isinstance(origin, dict) else ""
    if kind != "agent" and actor.startswith("key:"):
        # A write made with an API key: which one (its name, if it has one, and prefix).
        prefix = actor[4:]
        name = (context.get("key_names") or {}).get(prefix, "")
        named = f"{_escape(name)} " if name else ""
        return mark_safe(
            f'<span class="writer writer-key">API key {named}'
            f"<code>{_escape(prefix)}&hellip;</code></span>"
        )
    return mark_safe(writer_html(kind, session_id, project_id, environment, _url_env(context)))


_CLOCK = "memoryadmin.clock"


@register.simple_tag(takes_context=True)
def time(context: template.Context, value: datetime | None) -> SafeString:
    if value is None:
        return mark_safe("")
    now, zone = _render_clock(context)
    return mark_safe(time_html(value, now=now, zone=zone, translated=settings.USE_I18N))


@register.simple_tag
def size(size: int, max_bytes: int) -> SafeString:
    return mark_safe(size_html(int(size), int(max_bytes)))


def document_rows(
    rows: list[dict[str, Any]],
    *,
    document_url: str,
    max_bytes: int,
    project_id: str,
    environment: str,
    url_env: tuple[str, str],
    autofocus_first: bool = False,
    selectable: bool = False,
) -> SafeString:
    """The document list's rows (the page's hot path), built in one pass: the cells'
    functions without a template render per cell (a page of 50 rows costs a fraction
    of a millisecond). A page's rows repeat a few sizes: each size's cell is built once
    per page (an agent's writer cell is remembered per process by `_agent_html`)."""
    html: list[str] = []
    # Once per page, not per row: the clock, the time zone, the escaped list URL.
    now = timezone.now()
    zone = timezone.get_current_timezone()
    base = _escape(document_url)
    translated = settings.USE_I18N
    sizes: dict[int, str] = {}
    append = html.append
    for index, row in enumerate(rows):
        doc_id, revision, title, summary = (
            row["doc_id"],
            row["revision"],
            row["title"],
            row["summary"],
        )
        # One look for anything to escape in the row's text, not one per field.
        if _needs_escape(f"{doc_id}{revision}{title}{summary}"):
            doc_id, revision = _escape(doc_id), _escape(revision)
            title, summary = _escape(title), _escape(summary)
        focus = " autofocus" if autofocus_first and index == 0 else ""
        frozen = "" if row["agent_writes"] else '<span class="badge frozen">frozen</span>'
        pick = ""
        if selectable:  # the bulk form's checkbox: "<id>:<revision>", as bulk_selection reads
            pick = (
                f'  <td class="pick"><input type="checkbox" name="doc" form="bulk"'
                f' value="{doc_id}:{revision}"'
                f' aria-label="Select {doc_id}"></td>\n'
            )
        writer = writer_html(
            row["writer_kind"],
            row["writer_session_id"],
            project_id,
            environment,
            url_env,
            short=True,
        )
        size = row["bytes"]
        cell = sizes.get(size)
        if cell is None:
            cell = sizes[size] = size_html(size, max_bytes, compact=True)
        # One unit ("3 weeks ago"): the column stays narrow; the exact time is on hover.
        when = time_html(row["updated_at"], now=now, zone=zone, translated=translated, depth=1)
        append(
            f"<tr>\n{pick}"
            f'  <th scope="row"><a href="{base}{doc_id}/"{focus}>'
            f"<code>{doc_id}</code></a></th>\n"
            f'  <td title="{title}">{title}</td>\n'
            f'  <td class="summary" title="{summary}">{summary}</td>\n'
            f"  <td>{writer}</td>\n"
            f"  <td>{when}</td>\n"
            f"  <td>{cell}</td>\n"
            f"  <td>{frozen}</td>\n"
            "</tr>\n"
        )
    return mark_safe("".join(html))


# The header's section tabs: (URL name, label, the permission property that shows
# it or None, the section that marks it current). Review has its count badge.
_SECTION_TABS = (
    ("web:overview", "Overview", None, "overview"),
    ("web:inventory", "Memory", None, "memory"),
    ("web:review", "Review", "can_review", "review"),
    ("web:audit", "Audit log", None, "audit"),
    ("web:export", "Export", "can_export", "export"),
    ("web:sessions", "Sessions", None, "sessions"),
    ("web:incidents", "Incidents", None, "incidents"),
    ("web:erasures", "Erasures", None, "erasures"),
    ("web:deployments", "Deployments", None, "deployments"),
    ("web:keys", "Keys", "can_manage_keys", "keys"),
    ("web:webhooks", "Webhooks", "can_manage_webhooks", "webhooks"),
    ("web:people", "People", "can_manage_people", "people"),
)
_CURRENT_PAGE = ' aria-current="page"'


def _text(value: Any) -> str:
    """A value as `{{ value }}` renders it: text, escaped unless already safe."""
    if value is None:
        return "None"
    if isinstance(value, SafeString):
        return str(value)
    return _esc(str(value))


@functools.lru_cache(maxsize=1024)
def _tabs(
    p: str,
    e: str,
    env_project: str,
    production: bool,
    url_name: str,
    allowed: tuple[bool, ...],
    prefix: str,
    urlconf: str,
) -> str:
    """A project's environment and section tabs: the same few per project, environment,
    section and role, so built once each (`allowed`: the role's answer for each tab
    that needs a permission, in order)."""

    def url(viewname: str, *args: str) -> str:
        return _escape(_reversed(viewname, args, prefix, urlconf))

    # The environment tabs keep a project-wide section.
    target = env_section(url_name)
    out = [
        '\n<nav class="tabs" aria-label="Project sections">\n'
        '  <ul class="env-tabs" aria-label="Environment">\n    <li><a href="',
        url(f"web:{target}", env_project, "development"),
        '"',
        "" if production else _CURRENT_PAGE,
        '>Development</a></li>\n    <li><a class="prod" href="',
        url(f"web:{target}", env_project, "production"),
        '"',
        _CURRENT_PAGE if production else "",
        '>Production</a></li>\n  </ul>\n  \n  <ul class="section-tabs">\n',
    ]
    section = nav_section(url_name)
    permitted = iter(allowed)
    for name, label, permission, tab in _SECTION_TABS:
        out.append("    ")
        if permission is not None and not next(permitted):
            out.append("\n")
            continue
        current = _CURRENT_PAGE if section == tab else ""
        link = url(name, p, e)
        if tab == "review":
            count = url("web:review-count", p, e)
            out.append(
                f'<li><a href="{link}"{current}>Review <span id="review-count"'
                f' hx-get="{count}" hx-trigger="load" hx-swap="outerHTML"></span></a></li>\n'
            )
        else:
            out.append(f'<li><a href="{link}"{current}>{label}</a></li>\n')
    out.append("  </ul>\n</nav>\n")
    return "".join(out)


@register.simple_tag(takes_context=True)
def page_header(context: template.Context) -> SafeString:
    """The top bar (project menu, search, account) and a project's tabs, in one pass:
    every page repeats them, and as template tags they cost more than most pages' own
    content. The markup is what the template gave (docs/performance.md)."""
    user = context.get("user")
    page = context.get("page")
    memberships = context.get("memberships")
    e = context.get("e") or ""
    p = context.get("p") or ""
    out = [
        '<header class="topbar">\n  <a class="brand" href="',
        _escape(cached_reverse("web:home", context=context)),
        '">memoryadmin</a>\n  ',
    ]
    if user is not None and user.is_authenticated:
        out.append("\n  ")
        if memberships:
            out.append('\n  \n  <details class="project-menu">\n    <summary>')
            if page:
                out += [
                    _text(page.project.name),
                    ' <span class="muted-inverse">(',
                    _text(page.project.id),
                    ")</span>",
                ]
            else:
                out.append("Projects")
            out.append(
                '<span class="visually-hidden">: switch project</span></summary>\n    <ul>\n      '
            )
            current_id = page.project.id if page else None
            for m in memberships:
                url = cached_reverse(
                    "web:inventory", m.project.id, e or "development", context=context
                )
                current = ' aria-current="true"' if page and m.project.id == current_id else ""
                out += [
                    '\n      <li><a href="',
                    _escape(url),
                    '"',
                    current,
                    ">",
                    _text(m.project.name),
                    " <code>",
                    _text(m.project.id),
                    "</code></a></li>\n      ",
                ]
            out.append("\n    </ul>\n  </details>\n  ")
        out.append("\n  ")
        if page:
            out += [
                '\n  <form class="site-search" role="search" method="get" action="',
                _escape(cached_reverse("web:search", p, e, context=context)),
                '">\n    <label class="visually-hidden" for="site-search">Search ',
                _text(e),
                ' memory</label>\n    <input id="site-search" type="search" name="q" value="',
                _text(context.get("search_q", "")),
                '" maxlength="256" autocomplete="off" placeholder="Search memory ( / )"'
                ' aria-keyshortcuts="/">\n  </form>\n  ',
            ]
        out += [
            '\n  <div class="account">\n    <button type="button" class="link-button help-button"'
            ' data-help aria-haspopup="dialog" title="Keyboard shortcuts (?)">Shortcuts'
            ' <kbd>?</kbd></button>\n    <span><span class="user-name">',
            _text(user.get_username()),
            "</span>",
        ]
        if page:
            role = _text(page.role)
            out += [
                '<span class="user-name"> &middot; </span><span class="role role-',
                role,
                '">',
                role,
                "</span>",
            ]
        out += [
            '</span>\n    <form method="post" action="',
            _escape(cached_reverse("web:logout", context=context)),
            '">',
            _csrf_input(context),
            '<button type="submit" class="link-button">Log out</button></form>\n  </div>\n  ',
        ]
    out.append("\n</header>\n")
    if page:
        match = getattr(context.get("request"), "resolver_match", None)
        allowed = tuple(
            bool(getattr(page, permission))
            for _, _, permission, _ in _SECTION_TABS
            if permission is not None
        )
        out.append(
            _tabs(
                p,
                e,
                context.get("p") or page.project.id,
                page.production,
                (match.url_name if match is not None else None) or "",
                allowed,
                *_url_env(context),
            )
        )
    out.append("\n")
    return mark_safe("".join(out))


@register.simple_tag(takes_context=True)
def title_suffix(context: template.Context) -> SafeString:
    """What the title adds after a page's own title: its project and environment."""
    page = context.get("page")
    if not page:
        return mark_safe("")
    return mark_safe(f" &middot; {_text(page.project.id)} &middot; {_text(page.environment)}")


@register.simple_tag(takes_context=True)
def page_top(context: template.Context) -> SafeString:
    """Every page's `<body>` up to its `<main>`: the environment's class, htmx's CSRF
    header, the skip link, the production banner, the top bar and tabs (`page_header`)
    and the messages, in one pass: as template nodes, they cost most pages as much as
    their own content, and Django walks them all again on every render of a page that
    extends the layout. The markup is what the template gave (docs/performance.md)."""
    page = context.get("page")
    production = bool(page and page.production)
    token = context.get("csrf_token")
    out = [
        '<body class="',
        "env-production" if production else "env-development",
        '" hx-headers=\'{"X-CSRFToken": "',
        "" if token is None else _text(token),
        '"}\'>\n<a class="skip-link" href="#main">Skip to content</a>\n',
    ]
    if page and production:
        out += [
            '\n<div class="production-banner" role="note">\n'
            "  <strong>Production</strong> &middot; ",
            _text(page.project.name),
            ": what you change here, live agents recall.\n</div>\n",
        ]
    out.append("\n")
    out.append(page_header(context))
    messages = context.get("messages")
    if messages:
        out.append('\n<div class="messages" role="status">\n  ')
        for message in messages:
            out += [
                '<p class="message message-',
                _text(str(message.tags)),
                '">',
                _text(str(message)),
                "</p>",
            ]
        out.append("\n</div>\n")
    out.append("\n")
    return mark_safe("".join(out))


def _csrf_input(context: template.Context) -> str:
    """`{% csrf_token %}`'s hidden input."""
    token = context.get("csrf_token")
    if not token or token == "NOTPROVIDED":
        return ""
    return f'<input type="hidden" name="csrfmiddlewaretoken" value="{_escape(str(token))}">'


@register.simple_tag(takes_context=True)
def documents_head(context: template.Context, list_url: str) -> SafeString:
    """The document list's controls and table head (sort links, filter, as-of and bulk
    forms, caption, column heads), in one pass: the list page is the hot page, and as
    template tags these cost as much as its fifty rows. The markup is what the
    template gave (docs/performance.md)."""
    page = context["page"]
    resource = context["resource"]
    query = context.get("query") or ""
    sort = context.get("sort")
    sorts = context.get("sorts") or {}
    total_url = context.get("total_url")
    p, e = context.get("p"), context.get("e")
    url = _escape(list_url)
    rid = resource.resource_id
    documents_url = _escape(cached_reverse("web:documents", p, e, rid, context=context))
    filters = context.get("filters") or ""
    q = f"&amp;{_text(filters)}" if filters else ""
    out = ['<div class="list-head">\n  ']
    if total_url:
        # Counted again as the filter changes, with the filter's fields.
        out.append(
            f'<p class="total" data-total aria-live="polite" hx-get="{_text(total_url)}"'
            ' hx-trigger="load, input delay:300ms from:#document-filter,'
            ' search from:#document-filter" hx-include="#document-filter"'
            ' hx-sync="this:replace" hx-swap="innerHTML"></p>'
        )
    out.append('\n  <nav class="sort" aria-label="Sort documents">Sort by\n    ')
    for key, label in sorts.items():
        current = ' aria-current="true"' if key == sort else ""
        out.append(f'<a href="{url}?sort={_text(key)}{q}"{current}>{_text(label)}</a>')
    out.append(
        "\n  </nav>\n</div>\n"
        f'<form id="document-filter" class="filter" method="get" action="{documents_url}"'
        ' role="search">\n  '
    )
    if sort != "updated":
        out.append(f'<input type="hidden" name="sort" value="{_text(sort)}">')
    out.append(
        '\n  <label for="filter-q">Filter by id or title</label>\n'
        f'  <input id="filter-q" type="search" name="q" value="{_text(query)}"'
        ' autocomplete="off" maxlength="128"\n'
        '         aria-controls="document-rows"\n'
        f'         hx-get="{documents_url}"\n'
        '         hx-trigger="input changed delay:300ms, search"\n'
        '         hx-include="closest form"\n'
        '         hx-target="#document-rows"\n'
        '         hx-sync="this:replace"\n'
        '         hx-push-url="true">\n'
        '  <button type="submit">Filter</button>\n  '
    )
    facets = context.get("facets")
    if query or (facets is not None and facets.narrowed):
        out.append(f'<a href="{url}?sort={_text(sort)}">Clear</a>')
    if facets is not None:
        out.append(_facet_fields(facets, context.get("agents") or []))
    if context.get("facets_error"):
        out.append(f'<p class="form-errors" role="alert">{_text(context["facets_error"])}</p>')
    as_of = _escape(cached_reverse("web:documents-as-of", p, e, rid, context=context))
    out.append(
        "\n</form>\n"
        f'<form class="filter" method="get" action="{as_of}">\n'
        '  <label for="as-of">As it was at (UTC)</label>\n'
        '  <input id="as-of" type="datetime-local" name="asOf" step="1" required>\n'
        '  <button type="submit">Show</button>\n'
        "</form>\n"
    )
    selectable = bool(page.can_freeze)
    if selectable:
        # The list's query string (sort, filter, facets): the actions come back to it.
        kept = "" if sort in (None, "updated") else urlencode({"sort": sort})
        back = "&".join(part for part in (kept, filters) if part)
        bulk = _escape(cached_reverse("web:documents-bulk", p, e, rid, context=context))
        out.append(
            f'\n<form id="bulk" class="inline-form bulk-bar" method="post" action="{bulk}">\n'
            f"  {_csrf_input(context)}\n"
            f'  <input type="hidden" name="back" value="{_text(back)}">\n'
            '  <span data-bulk-count aria-live="polite">Select documents for</span>\n'
            f"  {_select_all_matching(filters)}\n"
            '  <button type="submit" name="action" value="freeze">Freeze selected</button>\n'
            '  <button type="submit" name="action" value="unfreeze">Unfreeze selected</button>\n  '
        )
        if page.can_export:
            out.append(
                '<button type="submit" name="action" value="export">Export selected</button>'
            )
        out.append("\n  ")
        if page.can_delete:
            out.append(
                '<button type="submit" name="action" value="delete" class="danger">'
                "Delete selected</button>"
            )
        out.append("\n</form>\n")
    label = sorts.get(sort) if isinstance(sorts, dict) else None
    out += [
        '\n<div class="table-scroll">\n<table class="grid documents',
        " selectable" if selectable else "",
        '">\n  <caption class="visually-hidden">Documents of ',
        _text(rid),
        ", sorted by ",
        _text(str(label).lower()),
        "</caption>\n  <colgroup>",
        '<col class="c-pick">' if selectable else "",
        '<col class="c-id"><col class="c-title"><col class="c-summary"><col class="c-writer">'
        '<col class="c-updated"><col class="c-size"><col class="c-frozen"></colgroup>\n'
        "  <thead>\n    <tr>\n      ",
        '<td class="pick"><input type="checkbox" data-select-page="bulk"'
        ' aria-label="Select all documents on the page"></td>'
        if selectable
        else "",
        '\n      <th scope="col">Id</th>\n'
        '      <th scope="col">Title</th>\n'
        '      <th scope="col">Summary</th>\n'
        '      <th scope="col">Last writer</th>\n'
        '      <th scope="col">Updated</th>\n'
        '      <th scope="col">Size <span class="muted">of ',
        kib(resource.max_bytes),
        "</span></th>\n"
        '      <th scope="col"><span class="visually-hidden">Agent writes</span></th>\n'
        '    </tr>\n  </thead>\n  <tbody id="document-rows">',
    ]
    return mark_safe("".join(out))


# The facets' choices (document_filters), as the page names them.
AGENT_WRITE_LABELS = {"enabled": "agents write", "review": "agents propose", "disabled": "frozen"}
WRITER_LABELS = {"owner": "an owner", "key": "an API key", "agent": "an agent session"}


def _options(current: str, choices: dict[str, str], anything: str) -> str:
    out = [f'<option value="">{_text(anything)}</option>']
    for value, label in choices.items():
        chosen = " selected" if value == current else ""
        out.append(f'<option value="{_text(value)}"{chosen}>{_text(label)}</option>')
    return "".join(out)


def _select_all_matching(filters: str) -> str:
    """The bulk form's choice of every document the filters keep (the server reads
    them from the filters it is sent; see web/services/bulk.py)."""
    hidden = "".join(
        f'<input type="hidden" name="{_text(name)}" value="{_text(value)}">'
        for name, value in parse_qsl(filters)
    )
    return (
        f'{hidden}<label class="bulk-all"><input type="checkbox" name="all" value="matching">'
        " Select all matching</label>"
    )


def _facet_fields(facets: Any, agents: list[str]) -> str:
    """The document list's facets, inside its filter form: a plain GET, so a link to the
    list reproduces the view."""
    params = facets.params()

    def value(name: str) -> str:
        return _text(params.get(name, ""))

    def day(name: str) -> str:
        return value(name) if len(params.get(name, "")) == 10 else ""

    agent_choices = {agent: agent for agent in agents}
    if facets.agent and facets.agent not in agent_choices:
        agent_choices[facets.agent] = facets.agent
    opened = " open" if facets.narrowed else ""
    return (
        f'\n<details class="facets"{opened}>\n  <summary>More filters</summary>\n'
        '  <div class="facet-fields">\n'
        '  <label>Agent writes <select name="agentWrites">'
        f"{_options(facets.agent_writes, AGENT_WRITE_LABELS, 'any')}</select></label>\n"
        '  <label>Last writer <select name="writer">'
        f"{_options(facets.writer, WRITER_LABELS, 'anyone')}</select></label>\n"
        '  <label>Agent <select name="agent">'
        f"{_options(facets.agent, agent_choices, 'any agent')}</select></label>\n"
        '  <label>Session <input name="session" maxlength="128" autocomplete="off"'
        f' value="{value("session")}" placeholder="ses_&hellip;"></label>\n'
        '  <label>Key prefix <input name="key" maxlength="128" autocomplete="off"'
        f' value="{value("key")}" placeholder="mak_&hellip;"></label>\n'
        '  <label>Updated from <input type="date" name="updatedFrom"'
        f' value="{day("updatedFrom")}"></label>\n'
        '  <label>Updated to <input type="date" name="updatedTo"'
        f' value="{day("updatedTo")}"></label>\n'
        '  <label>Size from (bytes) <input type="number" name="sizeMin" min="0"'
        f' value="{value("sizeMin")}"></label>\n'
        '  <label>Size to (bytes) <input type="number" name="sizeMax" min="0"'
        f' value="{value("sizeMax")}"></label>\n'
        '  <button type="submit">Apply filters</button>\n'
        "  </div>\n</details>\n"
    )


def _assets_markup(nonce: Any) -> str:
    css = _escape(static("memoryadmin/memory.css"))
    js = _escape(static("memoryadmin/memory.js"))
    htmx = htmx_script(version=2, minified=True, extensions="", nonce=nonce)
    return f'<link rel="stylesheet" href="{css}">\n  {htmx}\n  <script src="{js}" defer></script>'


@functools.cache
def _assets() -> str:
    return _assets_markup(None)


@receiver(setting_changed)
def _static_settings_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in {"STATIC_URL", "STATIC_ROOT", "STORAGES", "DEBUG"}:
        _assets.cache_clear()


@register.simple_tag(takes_context=True)
def page_assets(context: template.Context) -> SafeString:
    """The stylesheet and scripts of every page (`{% static %}` and `{% htmx_script %}`),
    built once per process: static URLs are fixed for a deploy (the manifest storage
    reads its manifest once)."""
    nonce = context.get("csp_nonce")
    return mark_safe(_assets() if nonce is None else _assets_markup(nonce))


# The document list page (documents.html) and its htmx fragments, built here: the list
# is the hot page, and as template nodes its few dozen variables, conditions and links
# cost as much as its fifty rows. The markup is what the template gave, whitespace
# included (docs/performance.md).


def _list_rows(context: template.Context) -> str:
    page = context["page"]
    return document_rows(
        context.get("rows") or [],
        document_url=context["document_url"],
        max_bytes=context["resource"].max_bytes,
        project_id=context.get("p") or "",
        environment=context.get("e") or "",
        url_env=_url_env(context),
        autofocus_first=bool(context.get("cursor")),
        selectable=bool(page.can_freeze),
    )


def _load_more(context: template.Context) -> str:
    """The row that loads the next page of rows in its place."""
    next_cursor = context.get("next_cursor")
    if not next_cursor:
        return ""
    resource = context["resource"]
    list_url = cached_reverse(
        "web:documents", context.get("p"), context.get("e"), resource.resource_id, context=context
    )
    filters = context.get("filters")
    kept = f"{_text(filters)}&amp;" if filters else ""
    href = (
        f"{_escape(list_url)}?sort={_text(context.get('sort'))}&amp;{kept}"
        f"cursor={_esc(quote(next_cursor, safe='/'))}"
    )
    columns = "8" if context["page"].can_freeze else "7"
    return (
        f'\n<tr class="load-more">\n  <td colspan="{columns}">\n    \n'
        f'    <a href="{href}"\n'
        f'       hx-get="{href}"\n'
        '       hx-target="closest tr" hx-swap="outerHTML">Load more documents</a>\n'
        "  </td>\n</tr>\n"
    )


def _results(context: template.Context) -> str:
    """The table's body: the rows (or why there are none) and "load more"."""
    empty = ""
    if not context.get("rows"):
        columns = "8" if context["page"].can_freeze else "7"
        query = context.get("query")
        facets = context.get("facets")
        narrowed = facets is not None and facets.narrowed
        if query:
            filters = " and the filters" if narrowed else ""
            message = f"No documents match &ldquo;{_text(query)}&rdquo;{filters}."
        elif narrowed:
            message = "No documents match the filters."
        else:
            message = "No documents yet."
        empty = f'\n    <tr><td colspan="{columns}" role="status">{message}</td></tr>\n    '
    return f"\n    {_list_rows(context)}{empty}\n    {_load_more(context)}\n  "


@register.simple_tag(takes_context=True)
def document_results(context: template.Context) -> SafeString:
    """The filter's fragment: the table's body."""
    return mark_safe(_results(context))


@register.simple_tag(takes_context=True)
def document_more(context: template.Context) -> SafeString:
    """ "Load more"'s fragment: the next rows and their own "load more"."""
    return mark_safe(_list_rows(context) + _load_more(context))


@register.simple_tag(takes_context=True)
def documents_page(context: template.Context) -> SafeString:
    """The page's content: the resource's heading, the list's controls and its table."""
    page = context["page"]
    resource: Any = context.get("resource")
    p, e = context.get("p"), context.get("e")
    # No resource: the total's URL opened as a page, the layout around nothing, as the
    # template rendered it (missing values are empty).
    rid = "" if resource is None else _text(resource.resource_id)
    keeps_documents = resource is not None and resource.keeps_documents
    inventory = _escape(cached_reverse("web:inventory", p, e, context=context))
    out = [
        '\n<nav class="crumbs" aria-label="Breadcrumb">'
        f'<a href="{inventory}">Memory</a> <span aria-hidden="true">&rsaquo;</span>'
        f' <span aria-current="page">{rid}</span></nav>\n'
        f'<div class="heading-row">\n  <h1>{rid}</h1>\n  '
    ]
    if page.can_edit and keeps_documents:
        create = cached_reverse("web:document-create", p, e, resource.resource_id, context=context)
        out.append(f'<a class="button primary" href="{_escape(create)}">New document</a>')
    kind, description, max_bytes = (
        ("", "", "")
        if resource is None
        else (_text(resource.kind), _text(resource.description), _text(resource.max_bytes))
    )
    out.append(
        f'\n</div>\n<p class="muted">{description} &middot; {kind} provider'
        f" &middot; maxBytes {max_bytes}</p>\n"
    )
    if not keeps_documents:
        out.append(
            f'\n<p class="notice">This resource is a {kind} provider: its records live with'
            " the provider, not here.</p>\n"
        )
    else:
        list_url = cached_reverse("web:documents", p, e, resource.resource_id, context=context)
        out += [
            "\n\n",
            documents_head(context, list_url),
            "\n  ",
            _results(context),
            "\n  </tbody>\n</table>\n</div>\n",
        ]
        if context.get("cursor"):
            filters = context.get("filters")
            kept = f"&amp;{_text(filters)}" if filters else ""
            out.append(
                f'<p><a href="{_escape(list_url)}?sort={_text(context.get("sort"))}{kept}">'
                "Back to the first page</a></p>"
            )
        out.append("\n")
    out.append("\n")
    return mark_safe("".join(out))


# The audit log's rows (audit.html), built in one pass as the document list's: a page of
# 50 entries rendered by the template language resolved about 900 variables. The markup
# is what the template's loop gave, whitespace included.


def _render_clock(context: template.Context) -> tuple[datetime, Any]:
    """The clock and the time zone, read once per render (a list shows a time a row)."""
    clock = context.render_context.get(_CLOCK)
    if clock is None:
        clock = context.render_context[_CLOCK] = (timezone.now(), timezone.get_current_timezone())
    return clock


@register.simple_tag(takes_context=True)
def audit_rows(context: template.Context) -> SafeString:
    entries = context.get("entries") or []
    if not entries:
        narrowed = getattr(context.get("where"), "narrowed", False)
        matching = " match this filter" if narrowed else ""
        return mark_safe(f'\n    <tr><td colspan="6">No entries{matching}.</td></tr>\n  ')
    p, e = str(context.get("p") or ""), str(context.get("e") or "")
    prefix, urlconf = _url_env(context)
    now, zone = _render_clock(context)
    translated = settings.USE_I18N
    focus_first = bool(context.get("cursor"))
    html: list[str] = []
    for index, entry in enumerate(entries):
        when = time_html(entry.created_at, now=now, zone=zone, translated=translated)
        resource_id, document_id = entry.resource_id, entry.document_id
        if document_id:
            url = _reversed("web:document", (p, e, resource_id, document_id), prefix, urlconf)
            focus = " autofocus" if focus_first and index == 0 else ""
            where = f'<a href="{_escape(url)}"{focus}>{_text(resource_id)}/{_text(document_id)}</a>'
        elif resource_id:
            url = _reversed("web:documents", (p, e, resource_id), prefix, urlconf)
            where = f'<a href="{_escape(url)}">{_text(resource_id)}</a>'
        else:
            where = ""
        revision = ""
        if entry.revision:
            revision = (
                f'<code title="{_text(entry.revision)}">'
                f"{_text(short_revision(entry.revision))}</code>"
            )
        details = "".join(
            f'<span class="kv">{_text(key)}: {_text(value)}</span>'
            for key, value in detail_items(entry.detail)
        )
        html.append(
            "\n    <tr>\n"
            f"      <td>{when}</td>\n"
            f'      <td class="who"><code>{_text(entry.actor)}</code></td>\n'
            f"      <td>{_text(entry.action)}</td>\n"
            f"      <td>{where}</td>\n"
            f"      <td>{revision}</td>\n"
            f'      <td class="details">{details}</td>\n'
            "    </tr>\n  "
        )
    return mark_safe("".join(html))
