"""Least-recently-used memos bounded by the bytes they hold, not only by their entries.

A module-level ``functools.lru_cache`` keyed by text holds whatever texts it
saw for the life of the process: 4,096 tool-call arguments of 20 KB each is
80 MB that no session owns any more. `ByteLRU` keeps the most recently used
entries only while their sizes add up to at most ``max_bytes``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["ByteLRU"]

V = TypeVar("V")


class ByteLRU(Generic[V]):
    """A thread-safe LRU map whose entries' sizes never add up to more than ``max_bytes``.

    Args:
        max_bytes: Most bytes held at once, as the sizes given to `put` count them.
    """

    def __init__(self, max_bytes: int) -> None:
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0:
            raise ValueError(f"max_bytes must be an int >= 0, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self._items: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def held_bytes(self) -> int:
        """Bytes held now (never above ``max_bytes``)."""
        return self._bytes

    def get(self, key: Hashable) -> V | None:
        """The value kept under ``key`` (now the most recently used), or None."""
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: Hashable, value: V, size: int) -> None:
        """Keep ``value`` under ``key``, dropping the least recently used past the bound.

        An entry larger than ``max_bytes`` on its own is not kept.
        """
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._items.clear()
            self._bytes = 0
