"""Break 10 of the hardening issue: frames over 1 MiB were cut by Daphne with a raw 1006.

The web process (``rtcagent.serve``) starts its server with twice the gateway's limit, so a frame
up to the limit goes through, one over it gets the documented 3501, and only absurd ones are
cut."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from asgiref.sync import sync_to_async

from apps.accounts.tokens import issue_access_token
from tests.gateway.test_frames import _closed_with, _connected, _recv_lines
from tests.livesrv import LiveServer, start_daphne

pytestmark = [pytest.mark.django_db(transaction=True)]

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def default_gateway(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[LiveServer]:
    """A web process with the production limits (the shared fixture lowers them)."""
    server = start_daphne(tmp_path_factory.mktemp("daphne-limits"))
    yield server
    server.stop()


def _rpc_frame(size: int) -> str:
    head = '{"id":2,"rpc":{"method":"v1.session.list","data":{"limit":5,"pad":"'
    tail = '"}}}'
    return head + "x" * (size - len(head) - len(tail)) + tail


async def test_a_3_mib_frame_is_served(default_gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    ws = await _connected(default_gateway.ws_url, issue_access_token(user), max_size=None)
    await ws.send(_rpc_frame(3 * MiB))
    (reply,) = await _recv_lines(ws, timeout=20)
    assert reply == {"id": 2, "rpc": {"data": {"items": [], "next_cursor": ""}}}
    await ws.close()


async def test_a_frame_over_the_limit_gets_3501_not_a_bare_close(
    default_gateway, make_user
) -> None:
    user = await sync_to_async(make_user)()
    ws = await _connected(default_gateway.ws_url, issue_access_token(user), max_size=None)
    await ws.send(_rpc_frame(5 * MiB))
    code, pushes = await _closed_with(ws, timeout=20)
    assert code == 3501
    assert pushes[-1]["push"]["disconnect"] == {"code": 3501, "reason": "frame too large"}


async def test_the_connect_reply_tells_the_limits(default_gateway, make_user) -> None:
    from websockets.asyncio.client import connect

    user = await sync_to_async(make_user)()
    async with connect(default_gateway.ws_url) as ws:
        await ws.send(json.dumps({"id": 1, "connect": {"token": issue_access_token(user)}}))
        (reply,) = await _recv_lines(ws)
    assert reply["connect"]["data"]["limits"] == {
        "max_frame_bytes": 4 * MiB, "max_result_bytes": 2 * MiB, "max_json_depth": 64,
        "max_attachment_bytes": 100 * MiB, "max_attachments": 10,
    }
