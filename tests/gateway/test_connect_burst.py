"""A reconnect storm: hundreds of sockets connecting at once (a web restart) all get a reply.

Each connect joins three channel-layer groups; with redis-py's default pool (100 connections,
failing at once when full) a burst of this size used to close about half the sockets with 1011.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from apps.accounts.tokens import issue_access_token

pytestmark = [pytest.mark.django_db(transaction=True)]

BURST = 250
USERS = 25


async def _connect_once(url: str, token: str, start: asyncio.Event) -> dict[str, Any]:
    """Open a socket, send connect, and return the reply (or ``{"closed": code}``)."""
    await start.wait()
    async with connect(url, open_timeout=15, close_timeout=1) as ws:
        await ws.send(json.dumps({"id": 1, "connect": {"token": token, "name": "burst"}}))
        try:
            frame = await asyncio.wait_for(ws.recv(), 15)
        except ConnectionClosed as exc:
            return {"closed": exc.rcvd.code if exc.rcvd else 1006}
        return json.loads(str(frame).split("\n")[0])


async def test_a_burst_of_connects_all_get_a_connect_reply(gateway, make_user) -> None:
    users = [await sync_to_async(make_user)() for _ in range(USERS)]
    tokens = [issue_access_token(u) for u in users]
    start = asyncio.Event()
    tasks = [
        asyncio.create_task(_connect_once(gateway.ws_url, tokens[i % USERS], start))
        for i in range(BURST)
    ]
    await asyncio.sleep(0)  # every task is waiting on the event: release them together
    start.set()
    replies = await asyncio.wait_for(asyncio.gather(*tasks), 30)

    failed = [r for r in replies if "connect" not in r]
    assert failed == []
    assert all(r["id"] == 1 and r["connect"]["client"] for r in replies)
    assert "Too many connections" not in gateway.output()
