"""Raw WebSocket frames the SDKs never send: batching, malformed input, limits, keep-alive."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from apps.accounts.tokens import issue_access_token
from apps.gateway.events import item, publish_update

pytestmark = [pytest.mark.django_db(transaction=True)]


async def _recv_lines(ws: ClientConnection, timeout: float = 5) -> list[dict[str, Any]]:
    frame = await asyncio.wait_for(ws.recv(), timeout)
    assert isinstance(frame, str), "the server sends text frames only"
    assert "\n\n" not in frame and not frame.startswith("\n")
    return [json.loads(line) for line in frame.split("\n")]


async def _connected(url: str, token: str, **kw: Any) -> ClientConnection:
    ws = await connect(url, **kw)
    await ws.send(json.dumps({"id": 1, "connect": {"token": token, "name": "raw"}}))
    (reply,) = await _recv_lines(ws)
    assert reply["id"] == 1 and reply["connect"]["client"]
    return ws


async def _closed_with(ws: ClientConnection, timeout: float = 5) -> tuple[int, list[dict]]:
    """Read until the server closes; return the close code and the pushes seen."""
    pushes = []
    try:
        while True:
            for line in await _recv_lines(ws, timeout):
                pushes.append(line)
    except ConnectionClosed as exc:
        assert exc.rcvd is not None, "the server closed the connection"
        return exc.rcvd.code, pushes


async def test_connect_reply_shape(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    ws = await connect(gateway.ws_url)
    await ws.send(json.dumps({"id": 1, "connect": {"token": issue_access_token(user)}}))
    (reply,) = await _recv_lines(ws)
    result = reply["connect"]
    assert result["ping"] > 0 and result["pong"] is True
    assert result["expires"] is True and 0 < result["ttl"] <= 15 * 60
    topic = result["subs"][f"topic:u={user.id}"]
    assert topic["recoverable"] and topic["positioned"]
    assert isinstance(topic["offset"], int) and topic["epoch"]
    await ws.close()


async def test_batched_commands_get_one_reply_each(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    ws = await _connected(gateway.ws_url, issue_access_token(user))
    frame = "\n".join(
        json.dumps({"id": i, "rpc": {"method": "v1.nope", "data": {}}}) for i in (7, 8)
    )
    await ws.send(frame)
    replies: list[dict] = []
    while len(replies) < 2:
        replies += [r for r in await _recv_lines(ws) if r.get("id")]
    assert sorted(r["id"] for r in replies) == [7, 8]
    assert all(r["error"]["code"] == 104 for r in replies)
    await ws.close()


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        ("{not json", "invalid JSON"),
        ('{"id": 2, "teleport": {}}', "unknown command"),
        ('{"id": 2, "rpc": {"method": "v1.session.list"}, "history": {}}', "one method"),
        ('{"id": "2", "rpc": {"method": "v1.session.list"}}', "invalid id"),
        ('{"id": 2, "rpc": []}', "params must be an object"),
        ('{"id": 2}', "empty command with id"),
        ('{"id": 2, "connect": {}}', "already connected"),
        ('{"id": 2, "rpc": {"method": 12}}', "method must be a string"),
        ("[1, 2]", "not an object"),
    ],
)
async def test_malformed_frames_close_3501_and_other_connections_carry_on(
    gateway, make_user, frame: str, reason: str
) -> None:
    user = await sync_to_async(make_user)()
    token = issue_access_token(user)
    bad, good = await _connected(gateway.ws_url, token), await _connected(gateway.ws_url, token)
    await bad.send(frame)
    code, pushes = await _closed_with(bad)
    assert code == 3501
    disconnect = [p["push"]["disconnect"] for p in pushes if "disconnect" in p.get("push", {})]
    assert disconnect and disconnect[0]["code"] == 3501 and reason in disconnect[0]["reason"]

    await good.send(json.dumps({"id": 5, "rpc": {"method": "v1.nope"}}))
    (reply,) = await _recv_lines(good)
    assert reply["id"] == 5 and reply["error"]["code"] == 104
    await good.close()


async def test_oversize_frame_is_refused(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    ws = await _connected(gateway.ws_url, issue_access_token(user))
    payload = "x" * (70 * 1024)  # the test server allows 64 KiB
    await ws.send(json.dumps({"id": 2, "rpc": {"method": "v1.nope", "data": {"blob": payload}}}))
    code, pushes = await _closed_with(ws)
    assert code == 3501
    assert pushes[-1]["push"]["disconnect"]["reason"] == "frame too large"


async def test_binary_frames_are_refused(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    ws = await _connected(gateway.ws_url, issue_access_token(user))
    await ws.send(b'{"id": 2, "rpc": {"method": "v1.nope"}}')
    code, _ = await _closed_with(ws)
    assert code == 3501


async def test_command_before_connect_is_refused(gateway) -> None:
    ws = await connect(gateway.ws_url)
    await ws.send(json.dumps({"id": 1, "rpc": {"method": "v1.session.list"}}))
    code, _ = await _closed_with(ws)
    assert code == 3501


@pytest.mark.parametrize("token", ["", "garbage", 5, None])
async def test_bad_token_closes_3500(gateway, token: Any) -> None:
    ws = await connect(gateway.ws_url)
    await ws.send(json.dumps({"id": 1, "connect": {"token": token}}))
    code, pushes = await _closed_with(ws)
    assert code == 3500
    assert pushes[-1]["push"]["disconnect"] == {"code": 3500, "reason": "invalid token"}


async def test_unknown_origin_is_refused_inside_the_protocol(gateway) -> None:
    ws = await connect(gateway.ws_url, origin="https://evil.example")
    code, pushes = await _closed_with(ws)
    assert code == 3507
    assert pushes == [{"push": {"disconnect": {"code": 3507, "reason": "origin not allowed"}}}]


async def test_allowed_origin_connects(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    ws = await _connected(
        gateway.ws_url, issue_access_token(user), origin="http://localhost:8000"
    )
    await ws.close()


async def test_a_socket_that_never_pongs_is_closed_3012(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    ws = await _connected(gateway.ws_url, issue_access_token(user))
    pings = []
    code = 0
    try:
        while True:
            for line in await _recv_lines(ws, timeout=10):
                if line == {}:
                    pings.append(line)
    except ConnectionClosed as exc:
        code = exc.rcvd.code if exc.rcvd else 0
    assert pings == [{}]
    assert code == 3012


async def test_pongs_keep_the_socket_open(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    ws = await _connected(gateway.ws_url, issue_access_token(user))
    pings = 0
    while pings < 3:
        for line in await _recv_lines(ws, timeout=10):
            if line == {}:
                pings += 1
                await ws.send("{}")
    await ws.send(json.dumps({"id": 9, "rpc": {"method": "v1.nope"}}))
    (reply,) = await _recv_lines(ws)
    assert reply["id"] == 9
    await ws.close()


async def test_nothing_is_pushed_before_the_connect_reply(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()

    def publish_many() -> None:
        for i in range(30):
            publish_update(user_id=user.id, items=[item("session", "updated", i)], data_list=[])

    ws = await connect(gateway.ws_url)
    pub = asyncio.create_task(sync_to_async(publish_many)())
    await ws.send(json.dumps({"id": 1, "connect": {"token": issue_access_token(user)}}))
    first = await _recv_lines(ws)
    assert first[0]["id"] == 1
    await pub
    await ws.close()


async def test_history_with_a_bad_position_is_answered(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    ws = await _connected(gateway.ws_url, issue_access_token(user))
    channel = f"topic:u={user.id}"
    await ws.send(json.dumps({"id": 2, "history": {
        "channel": channel, "limit": 5, "since": {"offset": "abc", "epoch": "x"}}}))
    (reply,) = await _recv_lines(ws)
    assert reply == {"id": 2, "error": {"code": 107, "message": "bad request"}}
    await ws.send(json.dumps({"id": 3, "history": {
        "channel": channel, "limit": 5, "since": {"offset": 0, "epoch": "other"}}}))
    (reply,) = await _recv_lines(ws)
    assert reply["error"]["code"] == 112
    await ws.close()


async def test_refresh_of_a_deactivated_user_closes_3500(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    ws = await _connected(gateway.ws_url, issue_access_token(user))
    await ws.send(json.dumps({"id": 2, "refresh": {"token": issue_access_token(user)}}))
    (reply,) = await _recv_lines(ws)
    assert reply["refresh"]["expires"] is True and reply["refresh"]["client"]
    user.is_active = False
    await sync_to_async(user.save)()
    try:
        await ws.send(json.dumps({"id": 3, "refresh": {"token": issue_access_token(user)}}))
    except ConnectionClosed as exc:  # the ping tick (every PING s) saw it first: the same close
        assert exc.rcvd is not None and exc.rcvd.code == 3500
        return
    code, _ = await _closed_with(ws)
    assert code == 3500


async def test_refresh_with_another_users_token_closes_3500(gateway, make_user) -> None:
    user, other = await sync_to_async(make_user)(), await sync_to_async(make_user)()
    ws = await _connected(gateway.ws_url, issue_access_token(user))
    await ws.send(json.dumps({"id": 2, "refresh": {"token": issue_access_token(other)}}))
    code, pushes = await _closed_with(ws)
    assert code == 3500
    assert pushes[-1]["push"]["disconnect"]["reason"] == "token of another user"


async def test_connect_deadline_closes_silent_sockets_but_not_slow_connects(
    make_user, tmp_path
) -> None:
    from tests.livesrv import start_daphne

    server = start_daphne(tmp_path, RTC_CONNECT_TIMEOUT="0.05")
    try:
        silent = await connect(server.ws_url)
        code, _ = await _closed_with(silent)
        assert code == 3501
        # a connect takes longer than 50 ms here (database and Redis hops): it still succeeds
        user = await sync_to_async(make_user)()
        ws = await _connected(server.ws_url, issue_access_token(user))
        await ws.send(json.dumps({"id": 2, "rpc": {"method": "v1.session.list"}}))
        (reply,) = await _recv_lines(ws)
        assert reply["rpc"]["data"]["items"] == []
        await ws.close()
    finally:
        server.stop()
