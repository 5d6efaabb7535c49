"""Channel-layer sends from synchronous code (services, the worker).

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

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


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
