"""The channel layer: channels-redis on rtcagent's pools, and sends from synchronous code.

``RedisChannelLayer`` is channels-redis with one bounded *blocking* pool per event loop
(``rtcagent.redis.async_pool``): channels-redis's own pool fails at once beyond 100 connections,
so a burst of connects (each joins three groups) closed sockets with 1011 instead of waiting.
Its commands also ride out a restart of the server: an error in the layer's receive ends the
consumer that awaited it, and during an outage each consumer of the process would take its turn
at the receive and fail, closing every socket with 1011.

Sends from synchronous code (services, the worker):

``async_to_sync(layer.group_send)`` would start a new event loop per call, and channels-redis
keeps its connection pools per loop, so every send would open fresh Redis connections (about
5 ms each, on the streaming hot path). Instead one daemon thread per process runs one loop for
all sync-side sends; a send waits for its completion, so sends from one thread stay in order.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer as _RedisChannelLayer
from redis.asyncio import ConnectionPool

from rtcagent.redis import async_pool

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


class RedisChannelLayer(_RedisChannelLayer):
    """channels-redis whose per-loop pools are bounded and blocking (see the module docstring).
    A host entry is ``{"address": url, **connection options}``."""

    def create_pool(self, index: int) -> ConnectionPool:
        host = dict(self.hosts[index])
        return async_pool(host.pop("address"), **host)


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="channel-layer", daemon=True).start()
            _loop = loop
        return _loop


def group_send(group: str, message: dict[str, Any], *, timeout: float = 5.0) -> None:
    """Send to a channel-layer group from sync code and wait until it was handed to Redis."""
    future = asyncio.run_coroutine_threadsafe(
        get_channel_layer().group_send(group, message), _background_loop()
    )
    future.result(timeout)
