"""A small in-process cache with expiry, shared by the service's lookups."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def make_key(namespace: str, *parts: object) -> str:
    """The cache key of a lookup: its namespace and arguments."""
    return namespace + ":" + "".join(str(part) for part in parts)


class TTLCache:
    def __init__(self, ttl: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self._clock = clock
        self._entries: dict[str, tuple[float, Any]] = {}

    def get_or_compute(self, key: str, compute: Callable[[], Any]) -> Any:
        now = self._clock()
        hit = self._entries.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        value = compute()
        self._entries[key] = (now + self.ttl, value)
        return value

    def clear(self) -> None:
        self._entries.clear()


CACHE = TTLCache()
