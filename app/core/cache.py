"""Per-process answer caches: a value per key for a few seconds, bounded in size, all clearable at once.

Every cache of derived answers keys on the data generation (app/core/generation.py), so processes
never answer from different data; the TTL only bounds how long an answer may lag what is not in
the database (Prometheus, the clock). `clear_all` empties every cache of the process: tests call it
between tests, whose rolled-back transactions reuse generations and row ids a cache has seen.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")
_ALL: weakref.WeakSet[TtlCache] = weakref.WeakSet()


class TtlCache(Generic[V]):
    """Values kept per key for `ttl_s`; full at `max_entries`, when it starts again empty.

    With `single_flight`, concurrent callers of `get` wait for one computation instead of each
    running their own (a burst of refreshes costs one query).
    """

    def __init__(self, *, ttl_s: float, max_entries: int = 64, single_flight: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.clock = clock
        self.computations = 0
        self._entries: dict[Hashable, tuple[float, V]] = {}
        self._lock = threading.Lock()
        self._flight = threading.Lock() if single_flight else None
        _ALL.add(self)

    def peek(self, key: Hashable) -> tuple[bool, V | None]:
        """(True, value) while `key` holds a fresh value, else (False, None)."""
        with self._lock:
            entry = self._entries.get(key)
        if entry is None or self.clock() - entry[0] >= self.ttl_s:
            return False, None
        return True, entry[1]

    def put(self, key: Hashable, value: V) -> V:
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[key] = (self.clock(), value)
        return value

    def get(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The fresh value for `key`, or `compute()` stored under it."""
        if self._flight is None:
            return self._get(key, compute)
        with self._flight:
            return self._get(key, compute)

    def _get(self, key: Hashable, compute: Callable[[], V]) -> V:
        hit, value = self.peek(key)
        if hit:
            return value  # type: ignore[return-value]
        self.computations += 1
        return self.put(key, compute())

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def clear_all() -> None:
    """Empty every cache of this process."""
    for cache in list(_ALL):
        cache.clear()
