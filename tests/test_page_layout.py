"""Every page's layout: the tags that build it give the markup the template language gave
for the same context (the body's opening, the production banner, the messages, the
title), escaping what the template escaped and keeping what was already safe."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.messages.storage.base import Message
from django.template import Context, Template
from django.utils.safestring import mark_safe

# The layout as base.html wrote it in template nodes before the tags built it.
NODES = (
    "{% load memorypage %}"
    '<body class="{% if page.production %}env-production{% else %}env-development{% endif %}"'
    """ hx-headers='{"X-CSRFToken": "{{ csrf_token }}"}'>\n"""
    '<a class="skip-link" href="#main">Skip to content</a>\n'
    "{% if page.production %}\n"
    '<div class="production-banner" role="note">\n'
    "  <strong>Production</strong> &middot; {{ page.project.name }}: what you change here, live"
    " agents recall.\n</div>\n{% endif %}\n"
    "{% page_header %}{% if messages %}\n"
    '<div class="messages" role="status">\n'
    '  {% for message in messages %}<p class="message message-{{ message.tags }}">'
    "{{ message }}</p>{% endfor %}\n</div>\n{% endif %}\n"
)
TAGS = "{% load memorypage %}{% page_top %}"
TITLE_NODES = (
    "{% if page %} &middot; {{ page.project.id }} &middot; {{ page.environment }}{% endif %}"
)
TITLE_TAG = "{% load memorypage %}{% title_suffix %}"


class Project:
    id = "acme"
    name = 'Acme <"R&D"> & co'


class Page:
    """What the layout reads of a page (the tabs ask the role's permissions)."""

    project = Project()
    role = "owner"
    can_review = can_export = can_manage_keys = can_manage_webhooks = True
    can_manage_people = False

    def __init__(self, environment: str) -> None:
        self.environment = environment
        self.production = environment == "production"


def both(source: str, tag: str, **values: Any) -> tuple[str, str]:
    def render(template: str) -> str:
        messages = values.get("messages")
        context = {**values, "messages": None if messages is None else list(messages)}
        return Template(template).render(Context(context))

    return render(source), render(tag)


@pytest.mark.parametrize("environment", ["development", "production"])
@pytest.mark.parametrize(
    "messages",
    [
        None,
        [],
        [Message(25, "Saved <b>x</b> & more.")],
        [Message(20, "Nothing changed."), Message(30, mark_safe("<em>kept</em>"), "extra")],
    ],
)
def test_the_body_opening_is_the_templates_markup(
    environment: str, messages: list[Message] | None
) -> None:
    page = Page(environment)
    values = {"page": page, "p": "acme", "e": environment, "csrf_token": "t0k3n"}
    nodes, tag = both(NODES, TAGS, messages=messages, **values)
    assert tag == nodes
    banner = "Acme &lt;&quot;R&amp;D&quot;&gt; &amp; co: what you change here"
    assert ('class="production-banner"' in tag) is (banner in tag) is (environment == "production")
    if messages:
        assert tag.count('<p class="message message-') == len(messages)
    if messages and len(messages) == 1:
        assert "Saved &lt;b&gt;x&lt;/b&gt; &amp; more." in tag
    if messages and len(messages) == 2:
        assert '<p class="message message-extra warning"><em>kept</em></p>' in tag


def test_a_page_without_project_or_token_is_the_templates_markup() -> None:
    nodes, tag = both(NODES, TAGS, page=None, messages=None)
    assert tag == nodes
    assert tag.startswith(
        """<body class="env-development" hx-headers='{"X-CSRFToken": ""}'>\n<a class="skip-link\""""
    )


@pytest.mark.parametrize("page", [None, Page("development"), Page("production")])
def test_the_title_suffix_is_the_templates_markup(page: Page | None) -> None:
    nodes, tag = both(TITLE_NODES, TITLE_TAG, page=page)
    assert tag == nodes
    assert tag == ("" if page is None else f" &middot; acme &middot; {page.environment}")
