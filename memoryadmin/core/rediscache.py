"""The shared cache on Redis (`REDIS_URL`): Django's `RedisCache`, with two changes.

- One client per connection pool, not one per operation: Django's client builds a
  `redis.Redis` for every `get`, `add` or `incr`, which took more of this process's time
  than the round trip itself (an API request makes two or three of them). A client is
  safe to share: each command takes a connection of the pool.
- `counters_bump`: counters' increments, each made with its expiry when it is new, in one
  round trip (a script: INCR, then EXPIRE when the count is 1, for each; none after a
  counter past its stop). Django's
  `incr` asks whether the key exists first (two round trips), and a new counter's `add`
  a third.

- `slot_held`: a slot's (core/sharedcache.py) expiry extended or the slot deleted, only
  while the token it holds is the caller's, in one script.

Counters are plain integers, as Django stores them, so `get` and `get_many` read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient

# ARGV: each counter's timeout, then each one's stop (0: none; core/sharedcache.py).
BUMP = """
local counts = {}
local stopped = false
for i, key in ipairs(KEYS) do
  if stopped then
    counts[i] = 0
  else
    local count = redis.call('INCR', key)
    if count == 1 then redis.call('EXPIRE', key, ARGV[i]) end
    counts[i] = count
    local most = tonumber(ARGV[#KEYS + i])
    if most and most > 0 and count > most then stopped = true end
  end
end
return counts
"""


# A slot holds its holder's token (an integer, which Django stores as its digits).
SLOT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('DEL', KEYS[1]) else redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return 1
"""


class ReusingClient(RedisCacheClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Any] = {}
        self._bump: Any = None
        self._slot: Any = None

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        index = self._get_connection_pool_index(write)  # type: ignore[attr-defined]
        client = self._clients.get(index)
        if client is None:
            client = self._clients[index] = super().get_client(key, write=write)
        return client

    def bump(self, keys: list[str], timeouts: list[int], stops: list[int]) -> list[int]:
        if self._bump is None:
            self._bump = self.get_client(keys[0], write=True).register_script(BUMP)
        return [int(count) for count in self._bump(keys=keys, args=[*timeouts, *stops])]

    def slot(self, key: str, token: int, seconds: int | None) -> bool:
        if self._slot is None:
            self._slot = self.get_client(key, write=True).register_script(SLOT)
        wanted = "" if seconds is None else str(max(1, int(seconds)))
        return bool(self._slot(keys=[key], args=[str(token), wanted]))


class RedisCache(DjangoRedisCache):
    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = ReusingClient

    def counters_bump(
        self,
        counters: Sequence[tuple[str, int]],
        *,
        stops: Sequence[int] = (),
        version: int | None = None,
    ) -> list[int]:
        """Adds one to each `(key, timeout)` counter and returns their counts, in one round
        trip (one script); a new counter lasts `timeout` seconds (at least one). Past its
        stop (`stops`, in order), a counter leaves those after it as they are (counts 0)."""
        names = [self.make_and_validate_key(key, version=version) for key, _ in counters]
        timeouts = [max(1, int(timeout)) for _, timeout in counters]
        return cast(ReusingClient, self._cache).bump(names, timeouts, list(stops))

    def slot_held(
        self, key: str, token: int, seconds: int | None, *, version: int | None = None
    ) -> bool:
        """Whether `token` holds the slot `key`; if so it then lasts `seconds` from now,
        or is deleted (None)."""
        name = self.make_and_validate_key(key, version=version)
        return cast(ReusingClient, self._cache).slot(name, token, seconds)
