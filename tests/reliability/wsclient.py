"""A lean Centrifuge JSON client for the load tests: hundreds of them in one event loop.

It does what both official SDKs do and nothing more: connect with a token (and the topic's last
position, to recover), answer pings, reconnect with jittered exponential backoff, and hand each
topic publication to ``check``, which insists on consecutive offsets within one epoch.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake


@dataclass
class TopicClient:
    url: str
    token: str
    user_id: int
    epoch: str = ""
    last: int = 0
    received: int = 0
    errors: list[str] = field(default_factory=list)
    closes: list[int] = field(default_factory=list)
    connects: int = 0
    recovered: list[bool] = field(default_factory=list)
    ws: ClientConnection | None = None
    stopping: bool = False
    connected: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def channel(self) -> str:
        return f"topic:u={self.user_id}"

    def check(self, offset: int, epoch: str) -> None:
        if epoch != self.epoch:
            self.errors.append(f"epoch {epoch} != {self.epoch}")
        elif offset != self.last + 1:
            self.errors.append(f"offset {offset} after {self.last}")
        self.last = max(self.last, offset)
        self.received += 1

    async def run(self, *, backoff: tuple[float, float] = (0.2, 3.0)) -> None:
        """Stay connected until ``stop``; reconnect after any close with jittered backoff."""
        attempt = 0
        while not self.stopping:
            try:
                await self._session()
                attempt = 0
            except (OSError, ConnectionClosed, InvalidHandshake, TimeoutError) as exc:
                if isinstance(exc, ConnectionClosed) and exc.rcvd is not None:
                    self.closes.append(exc.rcvd.code)
            self.connected.clear()
            if self.stopping:
                return
            attempt += 1
            low, high = backoff
            await asyncio.sleep(random.uniform(low, min(high, low * 2**attempt)))

    async def _session(self) -> None:
        async with connect(self.url, open_timeout=20, max_size=None) as ws:
            self.ws = ws
            params: dict[str, Any] = {"token": self.token}
            if self.epoch:
                params["subs"] = {self.channel: {"recover": True, "offset": self.last,
                                                 "epoch": self.epoch}}
            await ws.send(json.dumps({"id": 1, "connect": params}))
            async for frame in ws:
                for line in str(frame).split("\n"):
                    await self._handle(json.loads(line))

    async def _handle(self, msg: dict[str, Any]) -> None:
        if msg == {}:
            assert self.ws is not None
            await self.ws.send("{}")
        elif msg.get("id") == 1:
            if "error" in msg:
                self.errors.append(f"connect error {msg['error']}")
                assert self.ws is not None
                await self.ws.close()
                return
            sub = msg["connect"]["subs"][self.channel]
            if self.epoch and sub["epoch"] != self.epoch:
                self.errors.append("epoch changed")
            if self.epoch:
                self.recovered.append(bool(sub.get("recovered")))
            self.epoch = sub["epoch"]
            if not self.connects:
                self.last = sub["offset"]
            for pub in sub.get("publications", []):
                self.check(pub["offset"], self.epoch)
            self.connects += 1
            self.connected.set()
        elif "push" in msg:
            push = msg["push"]
            if push.get("channel") == self.channel:
                self.check(push["pub"]["offset"], self.epoch)
            elif "disconnect" in push:
                self.closes.append(push["disconnect"]["code"])

    async def stop(self) -> None:
        self.stopping = True
        if self.ws is not None:
            await self.ws.close()
