from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.timesince import timesince

from memoryadmin.memory.limits import utf8_len

register = template.Library()


@register.simple_tag
def session_url(project_id: str, environment: str, session_id: str) -> str:
    """The page of an agent session, once the sessions page exists ("" until then)."""
    if not session_id:
        return ""
    try:
        return reverse("web:session", args=[project_id, environment, session_id])
    except NoReverseMatch:
        return ""


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
        text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
        items.append((str(key), text))
    return items


@register.filter
def ago(value: datetime) -> str:
    if timezone.now() - value < timedelta(minutes=1):
        return "just now"
    return f"{timesince(value)} ago"
