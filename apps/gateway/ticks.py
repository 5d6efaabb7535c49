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
"""

from __future__ import annotations

import asyncio
import logging
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


class Ticker:
    """One event loop's connections and the task that checks them."""

    def __init__(self) -> None:
        self.members: set[Any] = set()
        self.task: asyncio.Task[None] | None = None

    def add(self, consumer: Any) -> None:
        self.members.add(consumer)
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run())

    def discard(self, consumer: Any) -> None:
        self.members.discard(consumer)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(float(rtc_setting("PING_INTERVAL")))
            try:
                await self.tick()
            except Exception:  # never let the tick die: every connection depends on it
                log.exception("connection tick failed")

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
            await conn.on_tick(identity, verdict, pos)


_tickers: dict[asyncio.AbstractEventLoop, Ticker] = {}


def ticker() -> Ticker:
    """The running loop's ticker (created on first use)."""
    loop = asyncio.get_running_loop()
    found = _tickers.get(loop)
    if found is None:
        found = _tickers[loop] = Ticker()
    return found
