"""A minimal Centrifuge protocol v2 (JSON) client for the cases that open thousands of sockets
or page through history, where the official client's per-connection machinery would make the
load generator the bottleneck. Frames are exactly what the official client sends."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect


class RawClient:
    def __init__(self, url: str) -> None:
        self.url = url
        self.ws: ClientConnection | None = None
        self.ids = itertools.count(1)
        self.replies: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.reader: asyncio.Task[None] | None = None
        self.connect_reply: dict[str, Any] = {}
        self.error: Exception | None = None

    async def open(self) -> None:
        self.ws = await connect(self.url, compression=None, max_size=None, ping_interval=None,
                                open_timeout=60)
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.ws is not None
        try:
            async for frame in self.ws:
                for line in (frame if isinstance(frame, str) else frame.decode()).split("\n"):
                    if not line:
                        continue
                    if line == "{}":  # server ping: answer with a pong
                        await self.ws.send("{}")
                        continue
                    msg = orjson.loads(line)
                    fut = self.replies.pop(msg.get("id", 0), None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg)
        except Exception as exc:  # closed: pending callers see it through their futures
            self.error = exc
        finally:
            for fut in self.replies.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("closed"))

    async def command(self, body: dict[str, Any], within: float = 60) -> dict[str, Any]:
        assert self.ws is not None
        cid = next(self.ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.replies[cid] = fut
        await self.ws.send(orjson.dumps({"id": cid, **body}).decode())
        return await asyncio.wait_for(fut, within)

    async def connect(self, token: str, subs: dict[str, Any] | None = None) -> dict[str, Any]:
        if self.ws is None:
            await self.open()
        params: dict[str, Any] = {"token": token, "name": "bench"}
        if subs:
            params["subs"] = subs
        reply = await self.command({"connect": params})
        if "error" in reply:
            raise RuntimeError(f"connect refused: {reply['error']}")
        self.connect_reply = reply["connect"]
        return self.connect_reply

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self.reader is not None:
            self.reader.cancel()
