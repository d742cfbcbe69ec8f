"""The shared cache on Redis (memoryadmin/core/rediscache.py): counters in one round trip,
made with their expiry, read back by Django's own reads; one client per pool; and an API
key's rate limit, last use and usage counted through it (skips without a local Redis).
The same counters in one process's cache (memoryadmin/core/localcache.py). Counters that
stop past a limit, and slots given back or kept only by their holder, on each backend."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache, caches
from django.test.utils import override_settings

from memoryadmin.core.localcache import REMEMBERED_COUNTS
from memoryadmin.core.rediscache import ReusingClient
from memoryadmin.core.sharedcache import counters_bump, slot_take
from memoryadmin.memory.models import ApiKey
from memoryadmin.memory.services.key_usage import key_usage
from tests.helpers import DEV, DOCS, TEST_REDIS_URL, Keys, redis_prefix


def counter_bump(name: str, *, timeout: int) -> int:
    """One counter's bump, as the rate limit and the key's usage make theirs."""
    return counters_bump([(name, timeout)])[0]


@pytest.fixture
def redis_cache() -> Iterator[Any]:
    """The default cache on Redis under a prefix of this test; the raw client beside it."""
    with redis_prefix("sharedcache") as (client, prefix):
        caches = {
            "default": {
                "BACKEND": "memoryadmin.core.rediscache.RedisCache",
                "LOCATION": TEST_REDIS_URL,
                "KEY_PREFIX": prefix,
            }
        }
        with override_settings(CACHES=caches):
            yield client


@pytest.fixture
def local_cache() -> Iterator[Any]:
    """The default cache in this process, empty, as without REDIS_URL."""
    caches_setting = {
        "default": {"BACKEND": "memoryadmin.core.localcache.LocalCache", "LOCATION": "counters"}
    }
    with override_settings(CACHES=caches_setting):
        backend = caches["default"]
        backend.clear()
        yield backend
        backend.clear()


def test_a_local_counter_is_made_with_its_expiry_and_read_back_by_django(local_cache: Any) -> None:
    assert [counter_bump("hits", timeout=120) for _ in range(3)] == [1, 2, 3]
    name = local_cache.make_key("hits")
    assert 100 < local_cache._expire_info[name] - time.time() <= 120
    # Bumping it again keeps the expiry it was made with.
    local_cache._expire_info[name] = time.time() + 50
    assert counter_bump("hits", timeout=120) == 4
    assert local_cache._expire_info[name] - time.time() <= 50
    assert cache.get("hits") == 4
    assert cache.get_many(["hits", "other"]) == {"hits": 4}
    assert cache.incr("hits") == 5
    assert counter_bump("hits", timeout=120) == 6


def test_a_local_counter_that_expired_starts_again(local_cache: Any) -> None:
    assert counter_bump("window", timeout=60) == 1
    assert counter_bump("window", timeout=60) == 2
    local_cache._expire_info[local_cache.make_key("window")] = time.time() - 1
    assert counter_bump("window", timeout=60) == 1
    cache.delete("window")
    assert counter_bump("window", timeout=0) == 1
    assert local_cache._expire_info[local_cache.make_key("window")] - time.time() > 0


def test_local_counters_lose_no_count_between_threads(local_cache: Any) -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def bump() -> None:
        got = [counter_bump("shared", timeout=60) for _ in range(500)]
        with lock:
            seen.extend(got)

    threads = [threading.Thread(target=bump) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(seen) == list(range(1, 4001))
    assert cache.get("shared") == 4000


def test_a_counter_is_made_with_its_expiry_and_read_back_by_django(redis_cache: Any) -> None:
    assert [counter_bump("hits", timeout=120) for _ in range(3)] == [1, 2, 3]
    raw = cache.make_and_validate_key("hits")
    ttl = redis_cache.ttl(raw)
    assert 100 < ttl <= 120
    # Bumping it again keeps the expiry it was made with.
    redis_cache.expire(raw, 50)
    assert counter_bump("hits", timeout=120) == 4
    assert redis_cache.ttl(raw) <= 50
    assert cache.get("hits") == 4
    assert cache.get_many(["hits", "other"]) == {"hits": 4}
    assert cache.incr("hits") == 5


def test_a_counter_that_expired_starts_again(redis_cache: Any) -> None:
    assert counter_bump("window", timeout=60) == 1
    redis_cache.delete(cache.make_and_validate_key("window"))
    assert counter_bump("window", timeout=60) == 1


def test_every_operation_shares_one_client_of_the_pool(redis_cache: Any) -> None:
    backend = cache._cache  # type: ignore[attr-defined]
    assert backend.get_client(write=True) is backend.get_client("any", write=True)
    assert cache.add("mark", 1, timeout=60)
    assert not cache.add("mark", 1, timeout=60)
    cache.delete("mark")
    assert cache.add("mark", 1, timeout=60)


def test_api_requests_count_through_redis(
    redis_cache: Any, keys: Keys, client_for: Any, settings: Any
) -> None:
    settings.MEMORYADMIN_API_RATE = "3/minute"
    owner = client_for(keys.owner)
    assert [owner.get(f"{DOCS}{DEV}").status_code for _ in range(4)] == [200, 200, 200, 429]
    key = ApiKey.objects.get(prefix=keys.owner[:12])
    assert key.last_used_at is not None
    now = key_usage(keys=[key])[key.pk][-1]
    assert (now.requests, now.errors, now.throttled) == (4, 0, 1)


def test_a_projects_keys_share_its_window_through_redis(
    redis_cache: Any, keys: Keys, client_for: Any, settings: Any
) -> None:
    settings.MEMORYADMIN_PROJECT_API_RATE = "3/minute"
    owner, read_only = client_for(keys.owner), client_for(keys.read_only)
    assert [owner.get(f"{DOCS}{DEV}").status_code for _ in range(2)] == [200, 200]
    assert read_only.get(f"{DOCS}{DEV}").status_code == 200
    refused = read_only.get(f"{DOCS}{DEV}")
    assert refused.status_code == 429
    assert refused.json()["error"]["message"].startswith("This project's API keys together")
    assert owner.get(f"{DOCS}{DEV}").status_code == 429
    # Another project's key, and a key of every project, are not in acme's window.
    assert client_for(keys.other).get("/api/managed-agents/projects/globex").status_code == 200
    assert client_for(keys.all_projects).get(f"{DOCS}{DEV}").status_code == 200


def test_several_local_counters_bump_in_one_step_each_with_its_expiry(local_cache: Any) -> None:
    assert counters_bump([("a", 60), ("b", 3600)]) == [1, 1]
    assert counters_bump([("a", 60), ("b", 3600)]) == [2, 2]
    assert counters_bump([("b", 60)]) == [3]
    assert 50 < local_cache._expire_info[local_cache.make_key("a")] - time.time() <= 60
    assert 3500 < local_cache._expire_info[local_cache.make_key("b")] - time.time() <= 3600
    assert cache.get_many(["a", "b"]) == {"a": 2, "b": 3}


def test_local_counts_past_the_remembered_ones_go_on_and_read_back(local_cache: Any) -> None:
    last = REMEMBERED_COUNTS + 3
    counts = [counters_bump([("n", 60)])[0] for _ in range(last)]
    assert counts == list(range(1, last + 1))
    assert cache.get("n") == last
    cache.set("n", 41)  # a count another writer stored is read as it is
    assert counters_bump([("n", 60)]) == [42]
    assert cache.incr("n") == 43  # and stays what Django's own reads and writes take


def test_several_counters_bump_in_one_round_trip_each_with_its_expiry(redis_cache: Any) -> None:
    assert counters_bump([("a", 60), ("b", 3600)]) == [1, 1]
    assert counters_bump([("a", 60), ("b", 3600)]) == [2, 2]
    assert 50 < redis_cache.ttl(cache.make_and_validate_key("a")) <= 60
    assert 3500 < redis_cache.ttl(cache.make_and_validate_key("b")) <= 3600
    assert cache.get_many(["a", "b"]) == {"a": 2, "b": 2}


def test_an_api_request_counts_its_rate_and_usage_in_one_round_trip(
    redis_cache: Any, keys: Keys, client_for: Any, settings: Any, monkeypatch: Any
) -> None:
    settings.MEMORYADMIN_API_RATE = "2/minute"
    trips: list[list[str]] = []
    bump = ReusingClient.bump

    def counted(
        self: ReusingClient, names: list[str], timeouts: list[int], stops: list[int]
    ) -> list[int]:
        trips.append([name.rsplit(":", 2)[-1] for name in names])
        return bump(self, names, timeouts, stops)

    monkeypatch.setattr(ReusingClient, "bump", counted)
    owner = client_for(keys.owner)
    assert owner.get(f"{DOCS}{DEV}").status_code == 200
    # The key's window, the project's and the hour's requests, then nothing more for a 200.
    assert len(trips) == 1
    assert len(trips[0]) == 3
    assert trips[0][2] == "requests"
    assert owner.get(f"{DOCS}/missing{DEV}").status_code == 404
    assert owner.get(f"{DOCS}{DEV}").status_code == 429
    # A 404 and a 429 add their kind in a second round trip.
    assert [names[-1] for names in trips[1:]] == ["requests", "errors", "requests", "throttled"]
    key = ApiKey.objects.get(prefix=keys.owner[:12])
    now = key_usage(keys=[key])[key.pk][-1]
    assert (now.requests, now.errors, now.throttled) == (3, 1, 1)


@pytest.fixture(params=["local", "redis", "django"])
def any_cache(request: Any) -> Iterator[Any]:
    """The shared cache as this project makes it, local or on Redis, or a deployer's
    own backend (Django's LocMemCache: no `counters_bump` or `slot_held` of ours)."""
    if request.param == "redis":
        yield request.getfixturevalue("redis_cache")
        return
    backend = {
        "local": "memoryadmin.core.localcache.LocalCache",
        "django": "django.core.cache.backends.locmem.LocMemCache",
    }[request.param]
    with override_settings(CACHES={"default": {"BACKEND": backend, "LOCATION": "stops"}}):
        caches["default"].clear()
        yield caches["default"]
        caches["default"].clear()


def test_a_counter_past_its_stop_leaves_the_counters_after_it(any_cache: Any) -> None:
    """A person's page requests past their own window spend nothing of their project's."""
    counters = [("own", 60), ("wider", 60), ("widest", 60)]
    assert [counters_bump(counters, [2, 0]) for _ in range(4)] == [
        [1, 1, 1],
        [2, 2, 2],
        [3, 0, 0],
        [4, 0, 0],
    ]
    assert counters_bump([("other", 60), ("wider", 60)], [2]) == [1, 3]
    assert counters_bump([("other", 60), ("wider", 60), ("widest", 60)], [0, 2]) == [2, 4, 0]
    assert cache.get_many(["own", "wider", "widest"]) == {"own": 4, "wider": 4, "widest": 2}


def test_a_slot_is_given_back_and_kept_only_by_its_holder(any_cache: Any) -> None:
    """Once a slot has expired another may take it; the first holder's late give or keep
    leaves the new holder's slot as it is."""
    first = slot_take("download", 1)
    assert first is not None
    assert slot_take("download", 60) is None
    cache.delete("download")  # as if it expired
    second = slot_take("download", 60)
    assert second is not None
    assert second.token != first.token
    first.give()
    first.keep()
    assert slot_take("download", 60) is None  # still the second's
    second.keep()
    second.give()
    third = slot_take("download", 1)
    assert third is not None
    third.seconds = 60
    third.keep()  # lasts a minute from now, not a second
    time.sleep(1.2)
    assert slot_take("download", 60) is None
