"""The periodic checks of every open connection of this process, batched into one tick.

Each connection must learn, within a ping interval, that its token was revoked (the bell of
``events.disconnect_user`` may be lost) and that its user's topic has committed publications it
was not rung for (``GatewayConsumer`` docstring). Asked per connection, that was a thread hop, a
database read and a Redis script per socket per ping: about 4 % of a core at 1,000 idle sockets
(docs/performance.md). Here one task per event loop does it for all of them every
``PING_INTERVAL``: one thread hop, two database reads (``auth.identities_valid``) and one
pipelined Redis round trip (``stream.positions``), then each connection acts on its own answer
(``GatewayConsumer.on_tick``).

A failed read skips that part of the tick (the next tick tries again); connections are never
closed because the database or Redis was away.

The same ticker sends the pings (``{}``): every ``PING_INTERVAL / PING_SLOTS`` one of
``PING_SLOTS`` slots of connections is pinged, so each connection is pinged once per interval,
and a new connection joins the slot pinged last, so its first ping comes one interval after
its connect (less at most one slot's time), never right after it. Connections arriving at an
even pace spread evenly over the slots.
A connection still waiting for its pong ``PONG_TIMEOUT`` after its ping is closed with 3012.
A task per connection did this before, with two timers per ping: about a third of the Python
work an idle socket cost (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import KeysView
from typing import Any

from channels.db import database_sync_to_async

from rtcagent.conf import rtc_setting

from . import stream
from .auth import Identity, identities_valid

log = logging.getLogger(__name__)


def check(identities: list[Identity]) -> tuple[list[bool] | None, dict[int, Any] | None]:
    """Validity of each identity and the topic position of each user (None: that read failed)."""
    try:
        valid: list[bool] | None = identities_valid(identities)
    except Exception as exc:
        log.warning("re-checking %d connections failed: %r", len(identities), exc)
        valid = None
    try:
        positions: dict[int, Any] | None = stream.positions(
            sorted({i.user_id for i in identities}))
    except Exception as exc:
        log.warning("polling %d watermarks failed: %r", len(identities), exc)
        positions = None
    return valid, positions


PING_SLOTS = 20
PING_BATCH = 200  # pings sent before the loop lets other work in


class Ticker:
    """One event loop's connections, the task that checks them and the one that pings them."""

    def __init__(self) -> None:
        self.slots: list[set[Any]] = [set() for _ in range(PING_SLOTS)]
        self.slot_of: dict[Any, int] = {}  # every connection of the loop, and its ping slot
        self.last_pinged = PING_SLOTS - 1  # the slot a new connection joins
        self.task: asyncio.Task[None] | None = None
        self.pinger: asyncio.Task[None] | None = None

    @property
    def members(self) -> KeysView[Any]:
        """The loop's connections."""
        return self.slot_of.keys()

    def add(self, consumer: Any) -> None:
        if consumer not in self.slot_of:
            self.slot_of[consumer] = self.last_pinged
            self.slots[self.last_pinged].add(consumer)
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run())
        if self.pinger is None or self.pinger.done():
            self.pinger = asyncio.create_task(self._ping_slots())

    def discard(self, consumer: Any) -> None:
        slot = self.slot_of.pop(consumer, None)
        if slot is not None:
            self.slots[slot].discard(consumer)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(float(rtc_setting("PING_INTERVAL")))
            try:
                await self.tick()
            except Exception:  # never let the tick die: every connection depends on it
                log.exception("connection tick failed")

    async def _ping_slots(self) -> None:
        loop = asyncio.get_running_loop()
        slot = 0
        due = loop.time()
        while True:
            interval = float(rtc_setting("PING_INTERVAL"))
            due = max(due + interval / PING_SLOTS, loop.time())  # no drift, no catching up
            await asyncio.sleep(due - loop.time())
            self.last_pinged = slot  # joining it now: pinged one interval from now
            try:
                pinged = await self.ping([c for c in self.slots[slot] if not c.closed])
                if pinged:
                    timeout = min(float(rtc_setting("PONG_TIMEOUT")), interval * 0.9)
                    loop.call_later(timeout, self.expect_pongs, pinged)
            except Exception:  # never let the pings die: a missing ping makes clients leave
                log.exception("pinging connections failed")
            slot = (slot + 1) % PING_SLOTS

    @staticmethod
    async def ping(conns: list[Any]) -> list[Any]:
        """Ping ``conns``; return the ones pinged (a send that fails is that socket closing)."""
        pinged = []
        for n, conn in enumerate(conns, 1):
            conn.awaiting_pong = True  # before the send: its pong may be read before it returns
            try:
                await conn.send_objs({})
            except Exception as exc:
                conn.awaiting_pong = False
                log.debug("ping not sent: %r", exc)
            else:
                pinged.append(conn)
            if n % PING_BATCH == 0:
                await asyncio.sleep(0)
        return pinged

    @staticmethod
    def expect_pongs(pinged: list[Any]) -> None:
        for conn in pinged:
            if conn.awaiting_pong and not conn.closed:
                conn.no_pong()

    async def tick(self) -> None:
        conns = [c for c in self.members if c.identity is not None and not c.closed]
        if not conns:
            return
        identities = [c.identity for c in conns]
        valid, positions = await database_sync_to_async(check, thread_sensitive=False)(
            identities)
        for n, (conn, identity) in enumerate(zip(conns, identities, strict=True)):
            verdict = None if valid is None else valid[n]
            pos = None if positions is None else positions.get(identity.user_id)
            conn.on_tick(identity, verdict, pos)


_tickers: dict[asyncio.AbstractEventLoop, Ticker] = {}


def ticker() -> Ticker:
    """The running loop's ticker (created on first use)."""
    loop = asyncio.get_running_loop()
    found = _tickers.get(loop)
    if found is None:
        found = _tickers[loop] = Ticker()
    return found
