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
5 ms each). Instead one daemon thread per process runs one loop for all sync-side sends. A send
does not wait for Redis: it is queued behind the earlier sends of the same calling thread, so
those still reach Redis in order. Its failure is logged; at most ``MAX_QUEUED`` sends wait
(beyond that, while Redis hangs, new ones are dropped and logged). What goes through here is a
control message to a user's connections (a disconnect): best effort. The topic's bells and the
live frames do not come this way (``apps.gateway.livebus``). ``flush`` waits for the queued
ones (a worker that stops, and any process at its normal exit).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import threading
from typing import Any

from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer as _RedisChannelLayer
from redis.asyncio import ConnectionPool

from rtcagent.redis import async_pool

log = logging.getLogger(__name__)

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
            if _loop is None:  # a process that exits normally delivers what it queued
                atexit.register(flush)
            _loop = loop
        return _loop


MAX_QUEUED = 10_000
_tails: dict[int, asyncio.Task[None]] = {}  # calling thread -> its latest send (loop thread only)
_queued = 0  # sends not finished yet (under ``_lock``)


async def _chained(key: int, group: str, message: dict[str, Any], limit: float,
                   waited: bool) -> None:
    """On the loop: send after the calling thread's previous send has finished; a failure is
    logged here unless the caller waits for it (it is raised to that caller)."""
    prev = _tails.get(key)
    me = asyncio.current_task()
    assert me is not None
    _tails[key] = me
    try:
        if prev is not None:
            await asyncio.wait({prev})  # its outcome is its own
        async with asyncio.timeout(limit):
            await get_channel_layer().group_send(group, message)
    except Exception as exc:
        if not waited:
            log.error("channel-layer send to %s failed: %r", group, exc)
        raise
    finally:
        if _tails.get(key) is me:
            del _tails[key]


def _done(_future: Any) -> None:
    global _queued
    with _lock:
        _queued -= 1


def group_send(group: str, message: dict[str, Any], *, wait: bool = False,
               timeout: float = 5.0) -> None:
    """Send to a channel-layer group from sync code, in order with the calling thread's other
    sends; ``wait``: until it was handed to Redis (raising its error)."""
    global _queued
    with _lock:
        if _queued >= MAX_QUEUED and not wait:
            log.warning("channel-layer send to %s dropped: %d sends queued", group, _queued)
            return
        _queued += 1
    future = asyncio.run_coroutine_threadsafe(
        _chained(threading.get_ident(), group, message, timeout, wait), _background_loop()
    )
    future.add_done_callback(_done)
    if wait:
        future.result(timeout * 2)


def flush(timeout: float = 2.0) -> None:
    """Wait (at most ``timeout`` seconds) for the sends queued so far."""
    loop = _loop
    if loop is None or loop.is_closed():
        return

    async def pending() -> None:
        tasks = set(_tails.values())
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    with contextlib.suppress(Exception):
        asyncio.run_coroutine_threadsafe(pending(), loop).result(timeout + 1)
