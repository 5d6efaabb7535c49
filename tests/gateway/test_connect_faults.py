"""A connect while Redis is away is answered with a temporary error (the client retries), never
a 1011 close; once Redis is back the same client connects."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from asgiref.sync import sync_to_async
from websockets.asyncio.client import connect

from apps.accounts.tokens import issue_access_token
from rtcagent.embedded import ensure_valkey, restart_valkey, stop_valkey
from tests.gateway.test_frames import _recv_lines
from tests.livesrv import LiveServer, start_daphne

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    var = tmp_path / "var"
    url = ensure_valkey(var)
    yield var, url
    stop_valkey(var)


@pytest.fixture
def web_on_own_redis(own_redis, tmp_path: Path) -> Iterator[LiveServer]:
    server = start_daphne(tmp_path, REDIS_URL=own_redis[1])
    yield server
    server.stop()


async def _connect_reply(url: str, token: str) -> dict:
    async with connect(url) as ws:
        await ws.send(json.dumps({"id": 1, "connect": {"token": token}}))
        (reply,) = await _recv_lines(ws, timeout=20)
        return reply


async def test_connect_without_redis_is_a_temporary_error(
    own_redis, web_on_own_redis, make_user
) -> None:
    user = await sync_to_async(make_user)()
    token = issue_access_token(user)
    var, url = own_redis
    os.kill(int(redis.Redis.from_url(url).info()["process_id"]), signal.SIGKILL)
    reply = await _connect_reply(web_on_own_redis.ws_url, token)
    assert reply == {"id": 1, "error": {"code": 100, "message": "internal server error",
                                        "temporary": True}}
    assert restart_valkey(var) == url  # back on the same port
    reply = await _connect_reply(web_on_own_redis.ws_url, token)
    assert reply["connect"]["data"]["user_id"] == user.id
