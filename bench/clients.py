"""The clients the cases drive: a tab of ours (the official ``centrifuge-python`` client, as
the widget uses it) and a connection to the bare relay. Both record what arrives with its
``time.monotonic_ns`` and wait for it with the one helper, ``Watched.until``."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from centrifuge import Client, ClientEventHandler, ServerPublicationContext
from websockets.asyncio.client import connect


class Watched:
    """A recorder of arrivals that sets ``changed`` on each; ``until`` waits for a condition."""

    def __init__(self) -> None:
        self.changed = asyncio.Event()

    async def until(self, cond: Callable[[], bool], within: float = 60) -> None:
        """Return once ``cond()`` holds, checked after every change (``TimeoutError`` after
        ``within`` seconds)."""

        async def loop() -> None:
            while not cond():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(loop(), within)


class Events(ClientEventHandler, Watched):
    """What one tab of ours received: chunks, pending RTCs, ended turns (with arrival times)."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks: dict[str, int] = {}  # piece -> receive time
        self.rtcs: dict[str, tuple[int, str]] = {}  # tool_call_id -> (receive time, rtc id)
        self.done_turns: set[str] = set()  # sessions whose turn ended

    async def on_publication(self, ctx: ServerPublicationContext) -> None:
        now = time.monotonic_ns()
        data = ctx.pub.data
        if ctx.channel.startswith("live:"):
            if data.get("type") == "chunk":
                self.chunks[data["delta"]] = now
        elif isinstance(data, dict) and data.get("items"):
            for it, entity in zip(data["items"], data["data_list"], strict=False):
                if it["entity"] == "turn" and entity.get("status") in ("completed", "failed"):
                    self.done_turns.add(entity["session_id"])
                if (it["entity"] == "rtc" and entity.get("status") == "pending"
                        and entity.get("tool_call_id", "").startswith("call_b")):
                    self.rtcs.setdefault(entity["tool_call_id"], (now, entity["id"]))
        self.changed.set()


class Tab:
    """One user's tab: the official client, as the widget uses it."""

    def __init__(self, url: str, token: str, events: Events | None = None) -> None:
        self.ev = events or Events()
        self.client = Client(url, events=self.ev, token=token, proxy=None)

    async def open(self) -> Tab:
        await self.client.connect()
        await self.client.ready(30)
        return self

    async def send(self, text: str) -> dict[str, Any]:
        reply = await self.client.rpc("v1.message.send", {
            "content_data": {"type": "user_message", "data": {"text": text}},
            "client_id": str(uuid.uuid4()), "client_session_id": "cs-" + uuid.uuid4().hex[:8],
            "server_session_id": ""})
        return reply.data

    async def close(self) -> None:
        await self.client.disconnect()


class Relay(Watched):
    """A connection to the bare relay."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.chunks: dict[str, int] = {}
        self.rtcs: dict[str, int] = {}
        self.ends: dict[str, int] = {}

    async def open(self) -> Relay:
        self.ws = await connect(self.url, compression=None, max_size=None, ping_interval=None)
        self.reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        async for frame in self.ws:
            now = time.monotonic_ns()
            push = orjson.loads(frame)["push"]
            data = push["pub"]["data"]
            if data.get("type") == "chunk":
                self.chunks[data["delta"]] = now
            elif data.get("type") == "rtc":
                self.rtcs[data["tool_call_id"]] = now
            elif data.get("type") == "end":
                self.ends[data["sid"]] = now
            self.changed.set()

    async def send(self, **ask: Any) -> None:
        await self.ws.send(orjson.dumps(ask).decode())

    async def close(self) -> None:
        await self.ws.close()
        self.reader.cancel()
