"""The one place that makes Redis clients and pools (the embedded Valkey or ``REDIS_URL``).

Every pool is bounded and *blocking*: when all ``RTC_REDIS_MAX_CONNECTIONS`` connections are in
use, a command waits up to ``RTC_REDIS_POOL_TIMEOUT`` seconds for one to come back. redis-py's
default pool instead fails at once at 100 connections (``MaxConnectionsError``), which a reconnect
storm after a web restart reaches in the channel layer. There is one synchronous pool per process
and one asyncio pool per event loop (asyncio connections cannot cross loops); the channel layer
(``rtcagent.layer``) and the cache use the same kind of pool.

A server that went away is reconnected to on the next command (same URL), so a restarted Valkey
needs nothing from the processes using it.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any

import redis
import redis.asyncio as aredis
from django.conf import settings

_lock = threading.Lock()
_sync: redis.Redis | None = None
_async_pools: weakref.WeakKeyDictionary[Any, aredis.BlockingConnectionPool] = (
    weakref.WeakKeyDictionary()
)

_CLIENT_OPTIONS: dict[str, Any] = {
    "decode_responses": True,
    "socket_timeout": 10,
    "socket_connect_timeout": 5,
}


def pool_limits() -> dict[str, Any]:
    """Size and wait of every pool: ``max_connections`` and ``timeout`` (seconds)."""
    return {
        "max_connections": settings.RTC_REDIS_MAX_CONNECTIONS,
        "timeout": settings.RTC_REDIS_POOL_TIMEOUT,
    }


def async_pool(url: str, **connection_options: Any) -> aredis.BlockingConnectionPool:
    """A bounded blocking asyncio pool for ``url``; use it from one event loop only."""
    return aredis.BlockingConnectionPool.from_url(url, **pool_limits(), **connection_options)


def get_redis() -> redis.Redis:
    """A process-wide synchronous client (thread-safe pool), answers decoded to ``str``."""
    global _sync
    with _lock:
        if _sync is None:
            pool = redis.BlockingConnectionPool.from_url(
                settings.REDIS_URL, **pool_limits(), **_CLIENT_OPTIONS, health_check_interval=30
            )
            _sync = redis.Redis(connection_pool=pool)
        return _sync


def new_async_redis() -> aredis.Redis:
    """An asyncio client on the running loop's shared pool. Closing it leaves the pool open for
    the loop's other clients; the pool goes away with its loop."""
    loop = asyncio.get_running_loop()
    with _lock:
        pool = _async_pools.get(loop)
        if pool is None:
            pool = _async_pools[loop] = async_pool(settings.REDIS_URL, **_CLIENT_OPTIONS)
    return aredis.Redis(connection_pool=pool)
