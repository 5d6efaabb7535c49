"""A connect while Redis is away is answered with a temporary error (the client retries), never
a 1011 close; once Redis is back the same client connects."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


async def _in_process_connect(make_user: Any) -> tuple[Any, dict]:
    """A socket to the consumer in this process (channels' communicator) that sent a connect:
    the communicator and the connect reply."""
    from channels.testing import WebsocketCommunicator

    from rtcagent.asgi import application

    user = await sync_to_async(make_user)()
    ws = WebsocketCommunicator(application, "/connection/websocket")
    connected, _ = await ws.connect()
    assert connected
    token = issue_access_token(user)
    await ws.send_to(text_data=json.dumps({"id": 1, "connect": {"token": token}}))
    reply = json.loads(await ws.receive_from(timeout=20))
    assert reply["id"] == 1 and reply["connect"]["data"]["user_id"] == user.id
    return ws, reply


async def _closed_for_a_reconnect(ws: Any) -> None:
    """The next frame (pings aside) is the 3004 push, then the close with the same code."""
    push = {}
    while push == {}:
        push = json.loads(await ws.receive_from(timeout=20))
    assert push == {"push": {"disconnect": {"code": 3004, "reason": "internal server error"}}}
    closed = await ws.receive_output(timeout=20)
    assert closed == {"type": "websocket.close", "code": 3004, "reason": "internal server error"}
    await ws.disconnect()


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


async def test_a_connect_whose_bus_subscription_fails_is_a_temporary_error(
    make_user, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live bus (topic bells, live frames) is subscribed before the position is read. When
    that fails (Redis restarting under the web process), the connect is answered with a
    temporary error, which clients retry, and nothing of the attempt stays subscribed; the
    retry connects. In this process on the real Redis; only the subscription is made to fail
    once."""
    from channels.testing import WebsocketCommunicator

    from apps.gateway import livebus
    from rtcagent.asgi import application

    real_join = livebus.Bus.join
    calls = []

    async def refused_once(self: livebus.Bus, user_id: int, receiver: object) -> None:
        calls.append(user_id)
        if len(calls) == 1:
            raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379.")
        await real_join(self, user_id, receiver)

    monkeypatch.setattr(livebus.Bus, "join", refused_once)
    user = await sync_to_async(make_user)()
    ws = WebsocketCommunicator(application, "/connection/websocket")
    assert (await ws.connect())[0]
    token = issue_access_token(user)
    await ws.send_to(text_data=json.dumps({"id": 1, "connect": {"token": token}}))
    reply = json.loads(await ws.receive_from(timeout=20))
    assert reply == {"id": 1, "error": {"code": 100, "message": "internal server error",
                                        "temporary": True}}
    assert user.id not in livebus.bus().local
    await ws.send_to(text_data=json.dumps({"id": 2, "connect": {"token": token}}))
    reply = json.loads(await ws.receive_from(timeout=20))
    assert reply["id"] == 2 and reply["connect"]["data"]["user_id"] == user.id
    assert len(livebus.bus().local[user.id]) == 1
    await ws.disconnect()


async def test_a_connect_that_fails_after_its_reply_closes_for_a_reconnect(
    make_user, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When a step after the connect reply fails, the client, which holds a successful reply,
    is closed with 3004, a code clients reconnect on, instead of staying on a socket whose next
    command would be refused with 3501, which clients take as final. In this process on the
    real Redis and database; the ping schedule's registration is made to fail."""
    from apps.gateway import ticks

    def broken(self: object, consumer: object) -> None:
        raise RuntimeError("the ping schedule is broken")

    monkeypatch.setattr(type(ticks.ticker()), "add", broken)
    ws, _ = await _in_process_connect(make_user)
    await _closed_for_a_reconnect(ws)


async def test_a_channel_layer_that_fails_under_a_connected_socket_closes_it_for_a_reconnect(
    make_user, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The consumer reads the channel layer (topic bells, disconnects) next to the socket. When
    that read fails after the connect (Redis gone, its group memberships maybe with it), the
    client is closed with 3004 and reconnects, joining its groups again; before the connect the
    read is retried, so a connect during a Redis outage still gets its temporary error (the test
    above). Runs in this process on the real Redis; only the layer's read is made to fail."""
    from channels.layers import get_channel_layer

    fail = asyncio.Event()
    layer_type = type(get_channel_layer())
    real_receive = layer_type.receive

    async def receive(self: object, channel: str) -> dict:
        reading = asyncio.ensure_future(real_receive(self, channel))
        failing = asyncio.ensure_future(fail.wait())
        done, _ = await asyncio.wait({reading, failing}, return_when=asyncio.FIRST_COMPLETED)
        if reading in done:
            failing.cancel()
            return reading.result()
        reading.cancel()
        raise redis.ConnectionError("Connection closed by server.")

    monkeypatch.setattr(layer_type, "receive", receive)
    ws, _ = await _in_process_connect(make_user)
    fail.set()
    await _closed_for_a_reconnect(ws)


async def test_a_consumer_ended_by_an_error_leaves_the_ping_schedule_and_the_live_bus(
    make_user, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler that raises (a bug) ends the consumer, as in channels. Whatever ended it, the
    socket is no longer pinged, checked or fed live frames: its process keeps no reference."""
    from apps.gateway import livebus, ticks
    from apps.gateway.consumer import GatewayConsumer

    async def broken(self: GatewayConsumer, cmd: object) -> None:
        raise RuntimeError("a bug in a handler")

    ws, reply = await _in_process_connect(make_user)
    user_id = reply["connect"]["data"]["user_id"]
    ticker = ticks.ticker()
    ours = [c for c in ticker.members if c.identity and c.identity.user_id == user_id]
    assert len(ours) == 1 and ours[0] in ticker.slot_of
    assert ours[0] in livebus.bus().local.get(user_id, set())
    monkeypatch.setattr(GatewayConsumer, "_dispatch", broken)
    await ws.send_to(text_data=json.dumps({"id": 2, "rpc": {"method": "v1.session.list"}}))
    with pytest.raises(RuntimeError, match="a bug in a handler"):
        await ws.wait(timeout=20)
    assert ours[0] not in ticker.members and ours[0] not in ticker.slot_of
    assert ours[0] not in livebus.bus().local.get(user_id, set())
