"""The one place that makes Redis clients and pools (the embedded Valkey or ``REDIS_URL``).

Every pool is bounded and *blocking*: when all ``RTC_REDIS_MAX_CONNECTIONS`` connections are in
use, a command waits up to ``RTC_REDIS_POOL_TIMEOUT`` seconds for one to come back. redis-py's
default pool instead fails at once at 100 connections (``MaxConnectionsError``), which a reconnect
storm after a web restart reaches in the channel layer. There is one synchronous pool per process
and one asyncio pool per event loop (asyncio connections cannot cross loops); the channel layer
(``rtcagent.layer``) and the cache use the same kind of pool.

A server that went away is reconnected to on the next command (same URL), so a restarted Valkey
needs nothing from the processes using it; asyncio commands also wait out the restart itself.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any

import redis
import redis.asyncio as aredis
from django.conf import settings
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff

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
    """A bounded blocking asyncio pool for ``url`` whose commands ride out a restart of the
    server; use it from one event loop only."""
    return aredis.BlockingConnectionPool.from_url(
        url, **pool_limits(), retry=_restart_retry(), **connection_options
    )


def _restart_retry() -> AsyncRetry:
    """A command whose connection is refused or closed is tried again for about 3 s, which covers
    a restart (the embedded Valkey's supervisor brings it back within about 1.5 s). Asyncio needs
    it: redis-py 8's asyncio pool does not notice a connection the server closed and hands it out,
    and an error in the channel layer's receive ends the consumer awaiting it (close 1011), each
    consumer of the process in turn during an outage. Timeouts are not retried: the command may
    have run. Synchronous pools notice closed connections, and their callers survive errors."""
    backoff = ExponentialBackoff(cap=0.5, base=0.05)  # 0.1, 0.2, 0.4, then 0.5 s
    return AsyncRetry(backoff, 8, supported_errors=(redis.ConnectionError,))


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


class Sent:
    """Commands written to Redis whose replies are read later (``replies``): their round trip
    overlaps what the caller waits for meanwhile (a PostgreSQL statement). redis-py's pipeline
    writes and reads in one call; this is its two halves, on a connection of the shared pool
    that stays checked out until the replies are read. Whoever creates one reads its replies,
    also on error paths (else that connection is not given back). No retry: a connection error
    is raised, from here or from ``replies``."""

    def __init__(self, commands: list[tuple[Any, ...]]) -> None:
        self._client = get_redis()
        self._names = [str(command[0]) for command in commands]
        self._replies: list[Any] | None = None
        self._error: BaseException | None = None
        pool = self._client.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_packed_command(conn.pack_commands(commands))
        except BaseException:
            conn.disconnect()
            pool.release(conn)
            raise
        self._conn: Any = conn

    def replies(self) -> list[Any]:
        """The replies, in order (read once; an error reply or a lost connection raises, now
        and on every later call)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                self._replies = [self._client.parse_response(conn, name)
                                 for name in self._names]
            except BaseException as exc:
                conn.disconnect()  # replies left unread: the connection cannot be reused
                self._error = exc
            finally:
                self._client.connection_pool.release(conn)
        if self._replies is None:
            assert self._error is not None
            raise self._error
        return self._replies

