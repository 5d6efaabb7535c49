"""The one place that makes Redis clients (the embedded Valkey or ``REDIS_URL``)."""

from __future__ import annotations

import threading

import redis
import redis.asyncio as aredis
from django.conf import settings

_lock = threading.Lock()
_sync: redis.Redis | None = None


def get_redis() -> redis.Redis:
    """A process-wide synchronous client (thread-safe pool), answers decoded to ``str``."""
    global _sync
    with _lock:
        if _sync is None:
            _sync = redis.Redis.from_url(
                settings.REDIS_URL,
                decode_responses=True,
                socket_timeout=10,
                socket_connect_timeout=5,
                health_check_interval=30,
            )
        return _sync


def new_async_redis() -> aredis.Redis:
    """A new asyncio client; the caller owns it (one per event loop) and closes it."""
    return aredis.Redis.from_url(
        settings.REDIS_URL, decode_responses=True, socket_timeout=10, socket_connect_timeout=5
    )
