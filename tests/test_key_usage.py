"""Per-key usage on the Keys page: requests, errors and 429s per API key and hour,
counted in the shared cache as requests finish (no database write per request)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from memoryadmin.memory.models import ApiKey, Resource
from memoryadmin.memory.services.key_usage import key_usage, key_usage_count
from tests.helpers import DEV, DOCS, Keys, html_of

KEYS_PAGE = "/projects/acme/development/keys/"


def key_of(raw: str) -> ApiKey:
    return ApiKey.objects.get(prefix=raw[:12])


def test_each_finished_request_counts_for_its_key(
    client_for: Any, keys: Keys, notes: Resource, settings: Any
) -> None:
    settings.MEMORYADMIN_API_RATE = "4/minute"
    owner, reader = client_for(keys.owner), client_for(keys.read_only)
    assert owner.get(f"{DOCS}{DEV}").status_code == 200
    assert owner.get(f"{DOCS}/missing{DEV}").status_code == 404
    assert owner.get(f"{DOCS}{DEV}").status_code == 200
    assert owner.get(f"{DOCS}{DEV}").status_code == 200
    assert owner.get(f"{DOCS}{DEV}").status_code == 429
    assert reader.get(f"{DOCS}{DEV}").status_code == 200
    usage = key_usage(keys=[key_of(keys.owner), key_of(keys.read_only)])
    owner_hours = usage[key_of(keys.owner).pk]
    assert len(owner_hours) == 24
    now = owner_hours[-1]
    assert (now.requests, now.errors, now.throttled) == (5, 1, 1)
    assert sum(h.requests for h in owner_hours[:-1]) == 0
    reader_now = usage[key_of(keys.read_only).pk][-1]
    assert (reader_now.requests, reader_now.errors, reader_now.throttled) == (1, 0, 0)


def test_counting_writes_nothing_to_the_database(api: APIClient, notes: Resource) -> None:
    api.get(f"{DOCS}{DEV}")  # the key's last-used mark, written at most once a minute
    with CaptureQueriesContext(connection) as queries:
        assert api.get(f"{DOCS}{DEV}").status_code == 200
    writes = [q["sql"] for q in queries if not q["sql"].lstrip().upper().startswith("SELECT")]
    assert writes == []


def test_hours_roll_and_old_hours_leave_the_window(keys: Keys) -> None:
    key = key_of(keys.owner)
    now = 1_800_000_000.0
    key_usage_count(key_id=key.pk, status=200, now=now - 3600 * 30)  # outside the window
    key_usage_count(key_id=key.pk, status=500, now=now - 3600 * 2)
    key_usage_count(key_id=key.pk, status=200, now=now)
    hours = key_usage(keys=[key], now=now)[key.pk]
    assert [(h.requests, h.errors) for h in hours if h.requests] == [(1, 1), (1, 0)]
    assert hours[-1].start == int(now // 3600) * 3600
    assert hours[-3].errors == 1


def test_the_keys_page_shows_each_key_s_usage(
    owner: Client, client_for: Any, keys: Keys, notes: Resource
) -> None:
    api = client_for(keys.owner)
    for _ in range(3):
        api.get(f"{DOCS}{DEV}")
    api.get(f"{DOCS}/missing{DEV}")
    html = html_of(owner.get(KEYS_PAGE))
    prefix = key_of(keys.owner).prefix
    row = html.split(f'<tr data-key="{prefix}">', 1)[1].split("</tr>", 1)[0]
    assert '<td data-usage="requests">4</td>' in row
    assert '<td data-usage="errors">1</td>' in row
    assert '<td data-usage="throttled">0</td>' in row
    assert 'aria-label="4 requests in the last 24 hours"' in row
    assert '<rect class="bar-bad"' in row


@pytest.mark.parametrize("persona", ["support", "viewer"])
def test_only_owners_see_key_usage(web: Any, persona: str) -> None:
    assert web(persona).get(KEYS_PAGE).status_code == 403
