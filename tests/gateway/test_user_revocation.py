"""Break 7 of the hardening issue: deactivated or deleted users, and revoked tokens, lose their
open sockets within seconds (the bell), and within one ping tick if the bell is lost."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from apps.accounts.services import user_revoke_tokens, user_set_active
from apps.accounts.tokens import issue_access_token
from tests.gateway.test_frames import _closed_with, _connected, _recv_lines

pytestmark = [pytest.mark.django_db(transaction=True)]


async def _closed_after(gateway: Any, user: Any, action: Callable[[], Any]) -> tuple[int, str]:
    ws = await _connected(gateway.ws_url, issue_access_token(user))
    await sync_to_async(action)()
    code, pushes = await _closed_with(ws, timeout=8)
    disconnect = [p["push"]["disconnect"] for p in pushes if "disconnect" in p.get("push", {})]
    assert disconnect and disconnect[-1]["code"] == code
    return code, disconnect[-1]["reason"]


async def test_deactivation_through_the_service_closes_the_socket(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    code, reason = await _closed_after(
        gateway, user, lambda: user_set_active(user_id=user.id, active=False))
    assert (code, reason) == (3500, "user deactivated")


async def test_deactivation_in_the_admin_closes_the_socket(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()

    def deactivate() -> None:  # what the admin's change form does
        user.is_active = False
        user.save()

    assert await _closed_after(gateway, user, deactivate) == (3500, "user deactivated")


async def test_deleting_the_user_closes_the_socket(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    assert await _closed_after(gateway, user, user.delete) == (3500, "user deleted")


async def test_revoking_tokens_closes_the_socket_and_refuses_the_old_token(
    gateway, make_user
) -> None:
    user = await sync_to_async(make_user)()
    old = issue_access_token(user)
    code, reason = await _closed_after(gateway, user, lambda: user_revoke_tokens(user_id=user.id))
    assert (code, reason) == (3500, "tokens revoked")
    async with connect(gateway.ws_url) as ws:
        await ws.send(json.dumps({"id": 1, "connect": {"token": old}}))
        code, _ = await _closed_with(ws)
        assert code == 3500
    await asyncio.sleep(max(0.0, 1.05 - time.time() % 1))  # iat has whole seconds
    fresh = await _connected(gateway.ws_url, issue_access_token(user))
    await fresh.close()


async def test_a_lost_bell_still_closes_the_socket_on_the_next_ping_tick(
    gateway, make_user
) -> None:
    user = await sync_to_async(make_user)()
    ws = await _connected(gateway.ws_url, issue_access_token(user))
    # an update that sends no signal and no bell: only the per-tick re-check can notice
    await sync_to_async(
        get_user_model().objects.filter(pk=user.id).update)(is_active=False)
    reasons = []
    with pytest.raises(ConnectionClosed) as closed:  # the fixture pings every 2 s: answer them
        while True:
            for line in await _recv_lines(ws, timeout=8):
                if line == {}:
                    await ws.send("{}")
                elif "disconnect" in line.get("push", {}):
                    reasons.append(line["push"]["disconnect"]["reason"])
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 3500
    assert reasons == ["token no longer valid"]


async def test_other_users_keep_their_sockets(gateway, make_user) -> None:
    user, other = await sync_to_async(make_user)(), await sync_to_async(make_user)()
    ws = await _connected(gateway.ws_url, issue_access_token(other))
    await _closed_after(gateway, user, lambda: user_set_active(user_id=user.id, active=False))
    await ws.send(json.dumps({"id": 5, "rpc": {"method": "v1.session.list", "data": {}}}))
    (reply,) = await _recv_lines(ws)
    assert reply["id"] == 5 and "rpc" in reply
    await ws.close()
