"""The fast path of ``live:u=<id>`` (LLM chunks): Redis pub/sub, not the channel layer.

Through the channel layer a chunk cost the worker a blocking ``group_send`` (a hop to the layer's
loop thread, then several Redis round trips: the group's members, one queue push per connection)
and each web process a ``BZPOPMIN`` and a decode per connection; under ten concurrent turns the
consumers' queues overflowed and chunks were dropped (docs/performance.md).

Here the worker encodes the whole Centrifuge push frame once and ``PUBLISH``es the text on the
user's bus channel: one round trip, no thread hop, sent in order from the worker's thread. Each
web process holds one pub/sub connection (per event loop), subscribed to the bus channels of the
users it has connections of, and forwards a frame's text unchanged to those connections.

Invariants:

* At most once, like the channel layer: nobody subscribed means the frame is gone; the final
  text of every message always follows as a topic Update.
* In order per user: one publisher thread per turn, one subscriber connection per process.
* A lost pub/sub connection (Redis restarted) is reopened and every channel subscribed again
  (redis-py's ``on_connect``); frames published meanwhile are lost, as the contract allows.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from rtcagent import keys
from rtcagent.redis import get_redis, new_async_redis

from . import protocol as P

log = logging.getLogger(__name__)


def bus_channel(user_id: int) -> str:
    """The Redis pub/sub channel of a user's live frames."""
    return keys.live_bus(user_id)


def publish(user_id: int, data: dict[str, Any]) -> int:
    """Send ``data`` to the user's open connections (their ``live:u=<id>``); returns the number
    of web processes that got it. Synchronous: one ``PUBLISH``."""
    frame = P.encode(P.publication_push(keys.live_channel(user_id), data))
    return int(get_redis().publish(bus_channel(user_id), frame))


class Receiver(Protocol):
    async def send_live(self, text: str) -> None: ...


class Bus:
    """One event loop's subscriptions: user id -> the local connections that want the frames."""

    def __init__(self) -> None:
        self.local: dict[int, set[Receiver]] = {}
        self.pubsub = new_async_redis().pubsub(ignore_subscribe_messages=True)
        self.task: asyncio.Task[None] | None = None
        # Commands on the one pub/sub connection go one at a time: redis-py's PubSub opens its
        # connection on the first command, and a burst of connects each racing to open it took
        # a pool connection apiece until the pool ran dry ("No connection available").
        self.commands = asyncio.Lock()

    async def join(self, user_id: int, receiver: Receiver) -> None:
        """Deliver the user's frames to ``receiver``. Raises when Redis refused the
        subscription (the receiver is then not registered, so the next join tries again)."""
        members = self.local.setdefault(user_id, set())
        members.add(receiver)
        if len(members) == 1:
            try:
                async with self.commands:
                    await self.pubsub.subscribe(bus_channel(user_id))
            except BaseException:
                members.discard(receiver)
                if not members and self.local.get(user_id) is members:
                    del self.local[user_id]
                raise
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._listen())

    async def leave(self, user_id: int, receiver: Receiver) -> None:
        members = self.local.get(user_id)
        if members is None or receiver not in members:
            return
        members.discard(receiver)
        if not members:
            del self.local[user_id]
            async with self.commands:
                if user_id not in self.local:  # nobody joined again while we waited
                    await self.pubsub.unsubscribe(bus_channel(user_id))

    async def _listen(self) -> None:
        while True:
            try:
                if not self.pubsub.subscribed:
                    await asyncio.sleep(0.05)
                    continue
                # A bounded wait: an unbounded read would hit the client's socket timeout.
                message = await self.pubsub.get_message(timeout=5.0)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away: reconnect (and resubscribe) on the next read
                log.warning("live bus read failed (%r); retrying", exc)
                await asyncio.sleep(0.5)
                continue
            if message is None or message.get("type") != "message":
                continue
            channel = message["channel"]
            user_id = int(channel[channel.index("{") + 1 : channel.index("}")])
            for receiver in list(self.local.get(user_id, ())):
                try:
                    await receiver.send_live(message["data"])
                except Exception:  # one broken socket must not stop the others' frames
                    log.exception("live frame to a connection of user %s failed", user_id)


_buses: dict[asyncio.AbstractEventLoop, Bus] = {}


def bus() -> Bus:
    """The running loop's bus (created on first use)."""
    loop = asyncio.get_running_loop()
    found = _buses.get(loop)
    if found is None:
        found = _buses[loop] = Bus()
    return found
