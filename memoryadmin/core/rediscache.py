"""The shared cache on Redis (`REDIS_URL`): Django's `RedisCache`, with two changes.

- One client per connection pool, not one per operation: Django's client builds a
  `redis.Redis` for every `get`, `add` or `incr`, which took more of this process's time
  than the round trip itself (an API request makes two or three of them). A client is
  safe to share: each command takes a connection of the pool.
- `counters_bump`: counters' increments, each made with its expiry when it is new, in one
  round trip (a script: INCR, then EXPIRE when the count is 1, for each). Django's
  `incr` asks whether the key exists first (two round trips), and a new counter's `add`
  a third.

Counters are plain integers, as Django stores them, so `get` and `get_many` read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient

BUMP = """
local counts = {}
for i, key in ipairs(KEYS) do
  local count = redis.call('INCR', key)
  if count == 1 then redis.call('EXPIRE', key, ARGV[i]) end
  counts[i] = count
end
return counts
"""


class ReusingClient(RedisCacheClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Any] = {}
        self._bump: Any = None

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        index = self._get_connection_pool_index(write)  # type: ignore[attr-defined]
        client = self._clients.get(index)
        if client is None:
            client = self._clients[index] = super().get_client(key, write=write)
        return client

    def bump(self, keys: list[str], timeouts: list[int]) -> list[int]:
        if self._bump is None:
            self._bump = self.get_client(keys[0], write=True).register_script(BUMP)
        return [int(count) for count in self._bump(keys=keys, args=timeouts)]


class RedisCache(DjangoRedisCache):
    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = ReusingClient

    def counters_bump(
        self, counters: Sequence[tuple[str, int]], *, version: int | None = None
    ) -> list[int]:
        """Adds one to each `(key, timeout)` counter and returns their counts, in one round
        trip (one script); a new counter lasts `timeout` seconds (at least one)."""
        names = [self.make_and_validate_key(key, version=version) for key, _ in counters]
        timeouts = [max(1, int(timeout)) for _, timeout in counters]
        return cast(ReusingClient, self._cache).bump(names, timeouts)
