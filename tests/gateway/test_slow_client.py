"""A client that stops reading is disconnected with 3008 once a bounded amount is unread; the
user's other connections and other users are unaffected."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator

import pytest
from asgiref.sync import sync_to_async
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from apps.accounts.tokens import issue_access_token
from apps.gateway.events import publish_live
from tests.gateway.test_frames import _connected, _recv_lines
from tests.livesrv import LiveServer, start_daphne

pytestmark = [pytest.mark.django_db(transaction=True)]

LIMIT = 256 * 1024


@pytest.fixture(scope="module")
def strict_gateway(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[LiveServer]:
    server = start_daphne(tmp_path_factory.mktemp("daphne-slow"),
                          RTC_SLOW_CLIENT_BYTES=str(LIMIT), RTC_PONG_TIMEOUT="1")
    yield server
    server.stop()


async def test_a_client_that_stops_reading_is_closed_as_slow(strict_gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    token = issue_access_token(user)
    # max_queue=1: the library stops reading the socket as soon as one frame waits unread
    stalled = await connect(strict_gateway.ws_url, max_queue=1, max_size=None)
    await stalled.send(json.dumps({"id": 1, "connect": {"token": token}}))
    (reply,) = await _recv_lines(stalled)
    assert "connect" in reply
    healthy = await _connected(strict_gateway.ws_url, token, max_size=None)

    chunk = {"type": "chunk", "delta": "x" * 16 * 1024}
    seen = 0

    async def read_healthy() -> None:
        nonlocal seen
        while seen < 40:
            for line in await _recv_lines(healthy, timeout=10):
                if line == {}:
                    await healthy.send("{}")
                elif "pub" in line.get("push", {}):
                    seen += 1

    reader = asyncio.create_task(read_healthy())
    for _ in range(40):  # 640 KiB: past the limit for the client that does not read
        await sync_to_async(publish_live)(user.id, chunk)
    await asyncio.wait_for(reader, 15)
    assert seen == 40  # the reading connection got everything

    await asyncio.sleep(2.5)  # the probe ping went unanswered for PONG_TIMEOUT
    # The close frame sits behind the unread data, and the server aborts the TCP connection
    # after its close handshake times out, so the client may never read the code itself.
    with pytest.raises(ConnectionClosed) as closed:
        for _ in range(1000):
            await asyncio.wait_for(stalled.recv(), 5)
    assert closed.value.rcvd is None or closed.value.rcvd.code == 3008
    assert f"closing a slow connection of user {user.id}" in strict_gateway.output()

    await healthy.send(json.dumps({"id": 9, "rpc": {"method": "v1.session.list", "data": {}}}))
    while True:  # the healthy connection is still served
        lines = await _recv_lines(healthy)
        if any(line.get("id") == 9 for line in lines):
            break
    await healthy.close()


async def test_a_stalled_client_never_holds_up_the_others(gateway, make_user) -> None:
    """More than the socket buffers hold goes unread (a tiny receive buffer on the stalled
    client's side, 16 MiB sent, below four times ``SLOW_CLIENT_BYTES``): the server must keep
    taking sends for it, as Daphne did, until the gateway closes it. Suspending them would stall
    the live bus, which forwards every user's frames of the process in turn: another user's
    frame would never arrive."""
    stuck_user, other_user = await sync_to_async(make_user)(), await sync_to_async(make_user)()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", gateway.port))
    stalled = await connect(gateway.ws_url, sock=sock, max_queue=1, max_size=None)
    await stalled.send(json.dumps({"id": 1, "connect": {"token": issue_access_token(stuck_user)}}))
    (reply,) = await _recv_lines(stalled)
    assert "connect" in reply
    other = await _connected(gateway.ws_url, issue_access_token(other_user))
    try:
        for _ in range(40):
            await sync_to_async(publish_live)(stuck_user.id, {"delta": "x" * 400 * 1024})
        await sync_to_async(publish_live)(other_user.id, {"delta": "for the other user"})

        async def other_gets_its_frame() -> None:
            while True:
                lines = await _recv_lines(other, timeout=5)
                if {} in lines:
                    await other.send("{}")
                if any("pub" in line.get("push", {}) for line in lines):
                    return

        await asyncio.wait_for(other_gets_its_frame(), 5)
    finally:
        stalled.transport.abort()
        await other.close()
