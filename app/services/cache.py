"""A small thread-safe LRU map: the services keep a few expensive, immutable results at hand."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[K, V]):
    """At most `size` entries; reading or writing one makes it the most recent."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size: an LRU holds at least 1 entry, got {size}")
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: K, value: V) -> V:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        """The cached value, or `make()` stored (made outside the lock: two callers may both make it)."""
        found = self.get(key)
        return found if found is not None else self.put(key, make())

    def forget(self, keep: Callable[[K], bool]) -> None:
        """Drop every entry whose key `keep` rejects."""
        with self._lock:
            for key in [k for k in self._items if not keep(k)]:
                del self._items[key]

    def __len__(self) -> int:
        return len(self._items)
