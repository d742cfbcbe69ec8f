"""The cache of one process (no `REDIS_URL`): Django's `LocMemCache`, with `counters_bump`.

Counters' increments, each made with its expiry when it is new, under the cache's own lock
in one step, as `RedisCache.counters_bump` does in one round trip (core/rediscache.py).
Django's `incr` validates the key for memcached (a pass over its characters), unpickles
and pickles the value, and a missing counter's `add` does it all again: two of them on
every API request cost as much as a tenth of a document's GET.

Counters are stored as Django stores any value (pickled), so `get`, `get_many` and `incr`
read them. Their names are ours (ASCII, no spaces), never a client's, so memcached's key
warnings have nothing to say about them.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

from django.core.cache.backends.locmem import LocMemCache


class LocalCache(LocMemCache):
    def counters_bump(
        self, counters: Sequence[tuple[str, int]], *, version: int | None = None
    ) -> list[int]:
        """Adds one to each `(key, timeout)` counter and returns their counts, all under
        one hold of the lock; a new (or expired) counter lasts `timeout` seconds (at
        least one)."""
        names = [(self.make_key(key, version=version), timeout) for key, timeout in counters]
        store: Any = self  # LocMemCache's own lock, entries and expiry (not in its stubs)
        counts = []
        with store._lock:
            for name, timeout in names:
                if store._has_expired(name):
                    value = 1
                    stored = pickle.dumps(value, self.pickle_protocol)
                    store._set(name, stored, max(1, int(timeout)))
                else:
                    value = int(pickle.loads(store._cache[name])) + 1
                    store._cache[name] = pickle.dumps(value, self.pickle_protocol)
                    store._cache.move_to_end(name, last=False)
                counts.append(value)
        return counts
