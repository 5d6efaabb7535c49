"""LLM chunks (``live:u=<id>``) over the live bus (Redis pub/sub, ``apps.gateway.livebus``):
every open socket of the user gets each chunk, in order, and nobody else does; a socket that
goes away stops nothing for the others. And the batched per-process check of every connection
(``apps.gateway.auth.identities_valid``) decides exactly as the per-connection one."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from apps.accounts.models import TokenFamily
from apps.accounts.tokens import issue_access_token
from apps.gateway.auth import Identity, identities_valid, identity_valid
from apps.gateway.events import publish_live
from tests.gateway.test_frames import _connected, _recv_lines

pytestmark = [pytest.mark.django_db(transaction=True)]


async def _chunks(ws, count: int) -> list[dict]:
    got: list[dict] = []
    while len(got) < count:
        for line in await _recv_lines(ws):
            if line == {}:
                await ws.send("{}")
            elif line.get("push", {}).get("channel", "").startswith("live:"):
                got.append(line["push"])
    return got


async def test_every_socket_of_the_user_gets_the_chunks_in_order(gateway, make_user) -> None:
    alice, bob = await sync_to_async(make_user)(), await sync_to_async(make_user)()
    tab1 = await _connected(gateway.ws_url, issue_access_token(alice))
    tab2 = await _connected(gateway.ws_url, issue_access_token(alice))
    other = await _connected(gateway.ws_url, issue_access_token(bob))
    for n in range(30):
        await sync_to_async(publish_live)(alice.id, {"type": "chunk", "delta": f"d{n}", "seq": n})
    for tab in (tab1, tab2):
        pushes = await _chunks(tab, 30)
        assert {p["channel"] for p in pushes} == {f"live:u={alice.id}"}
        assert [p["pub"]["data"]["seq"] for p in pushes] == list(range(30))
        assert "offset" not in pushes[0]["pub"]  # not positioned
    with pytest.raises(TimeoutError):  # Bob's socket got none of Alice's chunks
        await asyncio.wait_for(_chunks(other, 1), 0.5)

    await tab1.close()
    await asyncio.sleep(0.2)
    await sync_to_async(publish_live)(alice.id, {"type": "chunk", "delta": "after", "seq": 99})
    (push,) = await _chunks(tab2, 1)
    assert push["pub"]["data"]["delta"] == "after"
    await sync_to_async(publish_live)(bob.id, {"type": "chunk", "delta": "bob", "seq": 1})
    (push,) = await _chunks(other, 1)
    assert push["channel"] == f"live:u={bob.id}"
    await tab2.close()
    await other.close()


def test_the_batched_check_decides_like_the_single_one(make_user) -> None:
    now = timezone.now().timestamp()
    active, inactive, revoked_tokens, gone = (make_user() for _ in range(4))
    inactive.is_active = False
    inactive.save()
    revoked_tokens.tokens_valid_after = timezone.now() - timedelta(seconds=10)
    revoked_tokens.save()
    gone_id = gone.id
    gone.delete()
    live = TokenFamily.objects.create(user=active)
    dead = TokenFamily.objects.create(user=active, revoked_at=timezone.now())
    foreign = TokenFamily.objects.create(user=inactive)
    identities = [
        Identity(user_id=active.id, exp=0, iat=now),
        Identity(user_id=active.id, exp=0, iat=now, fid=str(live.id)),
        Identity(user_id=active.id, exp=0, iat=now, fid=str(dead.id)),
        Identity(user_id=active.id, exp=0, iat=now, fid=str(foreign.id)),
        Identity(user_id=active.id, exp=0, iat=now, fid=str(uuid.uuid4())),
        Identity(user_id=active.id, exp=0, iat=now, fid="not-a-uuid"),
        Identity(user_id=inactive.id, exp=0, iat=now),
        Identity(user_id=revoked_tokens.id, exp=0, iat=now - 60),
        Identity(user_id=revoked_tokens.id, exp=0, iat=now),
        Identity(user_id=gone_id, exp=0, iat=now),
    ]
    expected = [True, True, False, False, False, False, False, False, True, False]
    assert [identity_valid(i) for i in identities] == expected
    assert identities_valid(identities) == expected
    assert identities_valid([]) == []
