"""Issue 9 item 4: revoking one login (refresh-token family: logout, reuse, RFC 7009) closes the
sockets authenticated with its access tokens (3500) within one ping tick, while the same user's
other logins (another browser) keep theirs."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from apps.accounts.models import TokenFamily
from apps.accounts.services import token_family_revoke
from apps.accounts.tokens import decode_access_token, issue_token_pair
from tests.gateway.conftest import PING
from tests.gateway.test_frames import _connected, _recv_lines

pytestmark = [pytest.mark.django_db(transaction=True)]


async def _until_closed(ws: ClientConnection, timeout: float) -> tuple[int, list[str]]:
    """Answer pings until the server closes; the close code and the disconnect reasons."""
    reasons: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            for line in await _recv_lines(ws, max(0.1, deadline - time.monotonic())):
                if line == {}:
                    await ws.send("{}")
                elif "disconnect" in line.get("push", {}):
                    reasons.append(line["push"]["disconnect"]["reason"])
    except ConnectionClosed as exc:
        assert exc.rcvd is not None, "the server closed the connection"
        return exc.rcvd.code, reasons


async def _keep_alive(ws: ClientConnection, seconds: float) -> None:
    """Answer pings for ``seconds``; fail if the server closes meanwhile."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            lines = await _recv_lines(ws, left)
        except TimeoutError:
            return
        for line in lines:
            if line == {}:
                await ws.send("{}")


async def _still_serves(ws: ClientConnection) -> None:
    await ws.send(json.dumps({"id": 9, "rpc": {"method": "v1.session.list", "data": {}}}))
    while True:
        for line in await _recv_lines(ws, 5):
            if line == {}:
                await ws.send("{}")
            elif line.get("id") == 9:
                assert "rpc" in line, line
                return


async def _closes_alone(gateway: Any, revoke: Any) -> tuple[int, list[str], float]:
    """Two logins of one user, a socket each; ``revoke(pair_a)`` must close only socket A."""
    from django.contrib.auth import get_user_model

    user = await sync_to_async(get_user_model().objects.create_user)(
        f"fam{time.monotonic_ns()}@example.com", "pw")
    pair_a = await sync_to_async(issue_token_pair)(user)
    pair_b = await sync_to_async(issue_token_pair)(user)
    ws_a = await _connected(gateway.ws_url, pair_a["access"])
    ws_b = await _connected(gateway.ws_url, pair_b["access"])
    started = time.monotonic()
    await sync_to_async(revoke)(pair_a)

    async def closed_a() -> tuple[int, list[str], float]:
        code, reasons = await _until_closed(ws_a, timeout=2 * PING + 3)
        return code, reasons, time.monotonic() - started

    (code, reasons, elapsed), _ = await asyncio.gather(
        closed_a(), _keep_alive(ws_b, 2 * PING + 1))
    await _still_serves(ws_b)
    await ws_b.close()
    assert await sync_to_async(
        TokenFamily.objects.filter(user=user, revoked_at__isnull=True).count)() == 1
    return code, reasons, elapsed


async def test_revoking_a_family_closes_its_socket_and_no_other(gateway) -> None:
    def revoke(pair: dict[str, str]) -> None:
        fid = decode_access_token(pair["access"])["fid"]
        assert token_family_revoke(family_id=fid, reason="logout") is True

    code, reasons, elapsed = await _closes_alone(gateway, revoke)
    assert (code, reasons) == (3500, ["tokens revoked"])  # the bell, not the ping tick
    assert elapsed < PING  # at once: before any ping tick could have re-checked it


def _post(url: str, body: bytes, content_type: str) -> tuple[int, bytes]:
    request = urllib.request.Request(  # noqa: S310 - the test's own http server
        url, body, {"Content-Type": content_type}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - test server
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


async def test_refresh_reuse_over_http_closes_the_socket(gateway) -> None:
    def reuse(pair: dict[str, str]) -> None:
        url = gateway.http_url + "/api/auth/token/refresh/"
        body = json.dumps({"refresh": pair["refresh"]}).encode()
        assert _post(url, body, "application/json")[0] == 200
        status, answer = _post(url, body, "application/json")
        assert (status, json.loads(answer)["code"]) == (401, "token_reused")

    code, reasons, _ = await _closes_alone(gateway, reuse)
    assert (code, reasons) == (3500, ["tokens revoked"])  # the bell, not the ping tick


async def test_rfc7009_revocation_over_http_closes_the_socket(gateway) -> None:
    def revoke(pair: dict[str, str]) -> None:
        body = urllib.parse.urlencode(
            {"token": pair["access"], "token_type_hint": "access_token"}).encode()
        status, answer = _post(gateway.http_url + "/oauth2/revoke", body,
                               "application/x-www-form-urlencoded")
        assert (status, answer) == (200, b"")

    code, reasons, _ = await _closes_alone(gateway, revoke)
    assert (code, reasons) == (3500, ["tokens revoked"])  # the bell, not the ping tick


async def test_a_token_of_a_revoked_family_cannot_connect(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    pair = await sync_to_async(issue_token_pair)(user)
    fid = decode_access_token(pair["access"])["fid"]
    await sync_to_async(token_family_revoke)(family_id=fid, reason="logout")
    ws = await connect(gateway.ws_url)
    await ws.send(json.dumps({"id": 1, "connect": {"token": pair["access"]}}))
    code, _ = await _until_closed(ws, timeout=5)
    assert code == 3500
