"""A bounded in-process LRU of the ``data:`` URLs of processed images.

Every LLM call of a turn sends the whole conversation again, so an image is sent many times; it
is read from the store and base64-encoded once per worker process while it stays in here.
Bounded by characters (``MAX_CHARS``), not entries: one entry may be 5 MB.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

MAX_CHARS = 64 * 1024 * 1024


class DataUrlCache:
    def __init__(self, max_chars: int = MAX_CHARS) -> None:
        self.max_chars = max_chars
        self._items: OrderedDict[str, str] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: str) -> str | None:
        with self._lock:
            value = self._items.get(key)
            if value is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: str, value: str) -> None:
        if len(value) > self.max_chars:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._chars -= len(old)
            self._items[key] = value
            self._chars += len(value)
            while self._chars > self.max_chars:
                _, evicted = self._items.popitem(last=False)
                self._chars -= len(evicted)

    def drop(self, key: str) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._chars -= len(old)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._chars = 0


data_urls = DataUrlCache()
