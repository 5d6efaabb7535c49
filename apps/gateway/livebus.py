"""The fast path of ``live:u=<id>`` (LLM chunks) and of the topic's bells: Redis pub/sub, not
the channel layer.

Through the channel layer a chunk cost the worker a blocking ``group_send`` (a hop to the layer's
loop thread, then several Redis round trips: the group's members, one queue push per connection)
and each web process a ``BZPOPMIN`` and a decode per connection; under ten concurrent turns the
consumers' queues overflowed and chunks were dropped (docs/performance.md).

Here the worker encodes the whole Centrifuge push frame once and ``PUBLISH``es the text on the
user's bus channel: no thread hop, no wait for the reply, sent in order from the worker's thread
on that thread's own connection (``_Publisher``). Each web process holds one pub/sub connection
(per event loop), subscribed to the bus channels of the users it has connections of, and
forwards a frame's text unchanged to those connections.

A topic publication's *bell* (``ring_bell``: the Update itself with its epoch and offset, after
its row committed) goes the same way, marked with ``BELL`` before its JSON, and the web process
hands it to the connection's topic delivery (``Receiver.topic_bell``), which keeps the offsets
in order and repairs holes from the database. The bell and the offset's settle (its ``ZREM``
from the pending set) are one ``MULTI``/``EXEC``: no client can see the watermark past an
offset whose bell has not been published yet, nor the bell before the settle. Through the
channel layer a bell cost the sending process about 0.4 ms of CPU and a hop to the layer's
loop thread (docs/performance.md); a ``PUBLISH`` on the thread's own connection about 10 µs.

Invariants:

* At most once, like the channel layer: nobody subscribed means the frame is gone; the final
  text of every message always follows as a topic Update, and a lost bell is made good by the
  connection's watermark poll (``apps.gateway.consumer``).
* In order per user: one publisher thread per turn, one subscriber connection per process; a
  turn's chunks and its Updates' bells leave on the same connection, so they arrive in the
  order they were sent.
* A connection subscribes before it reads its topic position, so no bell rung after that
  read is missed.
* A lost pub/sub connection (Redis restarted) is reopened and every channel subscribed again
  (redis-py's ``on_connect``); frames published meanwhile are lost, as the contract allows.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Protocol

import orjson
import redis

from rtcagent import keys
from rtcagent.redis import get_redis, new_async_redis

from . import protocol as P

log = logging.getLogger(__name__)


def bus_channel(user_id: int) -> str:
    """The Redis pub/sub channel of a user's live frames."""
    return keys.live_bus(user_id)


BELL = b"~"  # a topic bell's frame starts with it; a live frame is a JSON object ("{")


def publish(user_id: int, data: dict[str, Any]) -> None:
    """Send ``data`` to the user's open connections (their ``live:u=<id>``): one ``PUBLISH`` on
    the calling thread's own connection, whose reply is read later (``_Publisher``)."""
    frame = orjson.dumps(P.publication_push(keys.live_channel(user_id), data))  # P.encode, as bytes
    _publisher().send([("PUBLISH", bus_channel(user_id), frame)])


def ring_bell(user_id: int, *, epoch: str, offset: int, data: Any) -> None:
    """Tell the user's connections that topic ``offset`` (of ``epoch``) committed, with its
    publication ``data``, and settle the offset (drop it from the pending set), atomically:
    ``MULTI``, ``PUBLISH``, ``ZREM``, ``EXEC`` on the calling thread's own connection, the
    replies read later. Raises only when Redis cannot be reached."""
    frame = BELL + orjson.dumps({"epoch": epoch, "offset": offset, "data": data})
    _publisher().send([("MULTI",), ("PUBLISH", bus_channel(user_id), frame),
                       ("ZREM", keys.topic_pending(user_id), offset), ("EXEC",)])


def sync() -> None:
    """Wait until Redis has run what the calling thread sent (reads the replies). A thread that
    ends calls it: a socket closed with unread replies is reset, not closed."""
    found = getattr(_local, "publisher", None)
    if found is not None and found.conn is not None:
        found._read_replies()


class _Publisher:
    """One thread's connection for the bus's commands (``PUBLISH``, a bell's ``MULTI``): they
    are written and their replies (which nobody needs) read in batches of ``MAX_UNREAD``.

    A chunk is the worker's most frequent command: through the shared pool each cost a pool
    checkout and return (a lock and a queue), redis-py's command layer and a wait for the
    reply, about 80 µs of CPU; written as one packed command on the thread's own connection it
    costs about 15 µs and no wait. Order is kept (one connection per thread, and a turn's
    chunks come from one thread). A connection that fails is dropped and the next command opens
    a new one; the frames it lost are lost, as the bus allows (at most once)."""

    MAX_UNREAD = 64  # replies left in the socket's buffer: a few bytes each

    def __init__(self) -> None:
        self.conn: Any = None
        self.unread = 0

    def send(self, commands: list[tuple[Any, ...]]) -> None:
        """Write ``commands`` in one packet; their replies are read later."""
        for attempt in (1, 2):  # a connection the server closed while idle: once more, anew
            conn = self._connection()
            try:
                if self.unread >= self.MAX_UNREAD:
                    self._read_replies()
                conn.send_packed_command(conn.pack_commands(commands), check_health=False)
                self.unread += len(commands)
                return
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                self.close()
                if attempt == 2:
                    raise

    def _connection(self) -> Any:
        if self.conn is None:
            pool = get_redis().connection_pool
            self.conn = pool.connection_class(**pool.connection_kwargs)
            self.conn.connect()
        return self.conn

    def _read_replies(self) -> None:
        """Read every reply still unread (they have long arrived, as a rule)."""
        while self.unread:
            self.unread -= 1
            try:
                self.conn.read_response()
            except redis.ResponseError as exc:  # refused (NOPERM): that frame only
                log.warning("live bus publication refused: %s", exc)
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                self.close()  # the next command opens a new connection
                return

    def close(self) -> None:
        conn, self.conn, self.unread = self.conn, None, 0
        if conn is not None:
            conn.disconnect()


_local = threading.local()


def _publisher() -> _Publisher:
    found = getattr(_local, "publisher", None)
    if found is None:
        found = _local.publisher = _Publisher()
    return found



class Receiver(Protocol):
    async def send_live(self, text: str) -> None: ...

    async def topic_bell(self, event: dict[str, Any]) -> None: ...


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
            channel, data = message["channel"], message["data"]
            try:
                user_id = int(channel[channel.index("{") + 1 : channel.index("}")])
                bell = orjson.loads(data[1:]) if data.startswith(_BELL_TEXT) else None
            except ValueError:  # not one of ours: one bad message must not end the reader
                log.warning("live bus message on %s not understood; dropped", channel)
                continue
            for receiver in list(self.local.get(user_id, ())):
                try:
                    if bell is None:
                        await receiver.send_live(data)
                    else:
                        await receiver.topic_bell(bell)
                except Exception:  # one broken socket must not stop the others' frames
                    log.exception("live frame to a connection of user %s failed", user_id)


_BELL_TEXT = BELL.decode()  # the subscriber's connection decodes what it reads
_buses: dict[asyncio.AbstractEventLoop, Bus] = {}


def bus() -> Bus:
    """The running loop's bus (created on first use)."""
    loop = asyncio.get_running_loop()
    found = _buses.get(loop)
    if found is None:
        found = _buses[loop] = Bus()
    return found
