"""The cache of one process (no `REDIS_URL`): Django's `LocMemCache`, with `counters_bump`.

Counters' increments, each made with its expiry when it is new, under the cache's own lock
in one step, as `RedisCache.counters_bump` does in one round trip (core/rediscache.py).
Django's `incr` validates the key for memcached (a pass over its characters), unpickles
and pickles the value, and a missing counter's `add` does it all again: two of them on
every API request cost as much as a tenth of a document's GET.

`slot_held`: a slot's (core/sharedcache.py) expiry extended or the slot deleted, only
while the token it holds is the caller's, under the same lock.

Counters are stored as Django stores any value (pickled), so `get`, `get_many` and `incr`
read them. Their names are ours (ASCII, no spaces), never a client's, so memcached's key
warnings have nothing to say about them.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

from django.core.cache.backends.locmem import LocMemCache

from memoryadmin.core.sharedcache import stop_of

# A counter's pickled form for counts up to this: each window counts from 1 again, so a
# process sees the same few thousand counts over and over, and pickle builds a pickler
# (or unpickler) for each call: about 0.9 (0.6) us for an integer, a dict's look-up 0.05.
REMEMBERED_COUNTS = 8192


class LocalCache(LocMemCache):
    def __init__(self, name: str, params: dict[str, Any]) -> None:
        super().__init__(name, params)
        self._pickled: dict[int, bytes] = {}
        self._counts: dict[bytes, int] = {}

    def _count_pickled(self, count: int) -> bytes:
        pickled = self._pickled.get(count)
        if pickled is None:
            pickled = pickle.dumps(count, self.pickle_protocol)
            if count <= REMEMBERED_COUNTS:
                self._pickled[count], self._counts[pickled] = pickled, count
        return pickled

    def counters_bump(
        self,
        counters: Sequence[tuple[str, int]],
        *,
        stops: Sequence[int] = (),
        version: int | None = None,
    ) -> list[int]:
        """Adds one to each `(key, timeout)` counter and returns their counts, all under
        one hold of the lock; a new (or expired) counter lasts `timeout` seconds (at
        least one). Past its stop (`stops`, in order), a counter leaves those after it as
        they are (counts 0)."""
        names = [(self.make_key(key, version=version), timeout) for key, timeout in counters]
        store: Any = self  # LocMemCache's own lock, entries and expiry (not in its stubs)
        counts: list[int] = []
        with store._lock:
            for index, (name, timeout) in enumerate(names):
                if stops and index and 0 < stop_of(stops, index - 1) < counts[-1]:
                    counts.extend([0] * (len(names) - index))
                    break
                if store._has_expired(name):
                    value = 1
                    store._set(name, self._count_pickled(value), max(1, int(timeout)))
                else:
                    pickled = store._cache[name]
                    count = self._counts.get(pickled)
                    value = (int(pickle.loads(pickled)) if count is None else count) + 1
                    store._cache[name] = self._count_pickled(value)
                    store._cache.move_to_end(name, last=False)
                counts.append(value)
        return counts

    def slot_held(
        self, key: str, token: int, seconds: int | None, *, version: int | None = None
    ) -> bool:
        """Whether `token` holds the slot `key`; if so it then lasts `seconds` from now,
        or is deleted (None)."""
        name = self.make_key(key, version=version)
        store: Any = self
        with store._lock:
            if store._has_expired(name) or pickle.loads(store._cache[name]) != token:
                return False
            if seconds is None:
                store._delete(name)
            else:
                store._expire_info[name] = self.get_backend_timeout(max(1, int(seconds)))
            return True
