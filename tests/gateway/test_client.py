"""The official centrifuge-python client against the real gateway (web process in a subprocess)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from centrifuge import ClientState, ReplyError
from django.db import transaction

from apps.accounts.tokens import issue_access_token
from apps.gateway.events import item, publish_update
from rtcagent import keys
from tests.gateway.conftest import PING, make_client

pytestmark = [pytest.mark.django_db(transaction=True)]


def _publish(user_id: int, count: int, tag: str = "") -> list[dict[str, Any]]:
    out = []
    for i in range(count):
        with transaction.atomic():
            out.append(
                publish_update(
                    user_id=user_id,
                    items=[item("session", "updated", f"s{i}")],
                    data_list=[{"n": i, "tag": tag}],
                )
            )
    return out


publish = sync_to_async(_publish, thread_sensitive=True)


async def test_connects_with_server_side_channels_and_positions(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    client, rec = make_client(gateway, issue_access_token(user))
    await client.connect()
    try:
        await rec.wait_for(lambda: len(rec.of("subscribed")) == 2)
        connected = rec.of("connected")[0]
        assert connected.client
        assert connected.data == {"user_id": user.id, "limits": {
            "max_frame_bytes": 64 * 1024, "max_result_bytes": 60 * 1024,
            "max_json_depth": 64, "max_attachment_bytes": 100 * 1024 * 1024,
            "max_attachments": 10}}
        topic = rec.subscribed(keys.topic_channel(user.id))[0]
        assert topic.recoverable and topic.positioned
        assert topic.stream_position.epoch and topic.stream_position.offset == 0
        live = rec.subscribed(keys.live_channel(user.id))[0]
        assert not live.recoverable
    finally:
        await client.disconnect()


async def test_receives_topic_publications_in_order(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    client, rec = make_client(gateway, issue_access_token(user))
    await client.connect()
    try:
        await rec.wait_for(lambda: len(rec.of("subscribed")) == 2)
        sent = await publish(user.id, 3)
        channel = keys.topic_channel(user.id)
        await rec.wait_for(lambda: len(rec.publications.get(channel, [])) == 3)
        pubs = rec.publications[channel]
        assert [p.offset for p in pubs] == [1, 2, 3]
        assert [p.data for p in pubs] == sent
        assert [p.data["offset"] for p in pubs] == [1, 2, 3]
    finally:
        await client.disconnect()


async def test_other_users_publications_are_not_delivered(gateway, make_user) -> None:
    alice, bob = await sync_to_async(make_user)(), await sync_to_async(make_user)()
    client, rec = make_client(gateway, issue_access_token(alice))
    await client.connect()
    try:
        await rec.wait_for(lambda: len(rec.of("subscribed")) == 2)
        await publish(bob.id, 2)
        await publish(alice.id, 1)
        await rec.wait_for(lambda: len(rec.of("publication")) >= 1)
        await asyncio.sleep(0.5)
        assert {c.channel for c in rec.of("publication")} == {keys.topic_channel(alice.id)}
        assert len(rec.of("publication")) == 1
    finally:
        await client.disconnect()


async def test_reconnect_recovers_exactly_the_missed_publications(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    client, rec = make_client(gateway, issue_access_token(user))
    channel = keys.topic_channel(user.id)
    await client.connect()
    await rec.wait_for(lambda: len(rec.of("subscribed")) == 2)
    await publish(user.id, 2)
    await rec.wait_for(lambda: len(rec.publications.get(channel, [])) == 2)
    await client.disconnect()

    missed = await publish(user.id, 5, tag="missed")
    await client.connect()
    try:
        await rec.wait_for(lambda: len(rec.subscribed(channel)) == 2)
        again = rec.subscribed(channel)[1]
        assert again.was_recovering and again.recovered
        await rec.wait_for(lambda: len(rec.publications[channel]) == 7)
        await asyncio.sleep(0.5)  # nothing more (no duplicates) arrives
        pubs = rec.publications[channel]
        assert [p.offset for p in pubs] == [1, 2, 3, 4, 5, 6, 7]
        assert [p.data for p in pubs[2:]] == missed
    finally:
        await client.disconnect()


async def test_lost_offset_state_gives_a_new_epoch_and_recovered_false(
    gateway, make_user, redis_client
) -> None:
    user = await sync_to_async(make_user)()
    client, rec = make_client(gateway, issue_access_token(user))
    channel = keys.topic_channel(user.id)
    await client.connect()
    await rec.wait_for(lambda: len(rec.of("subscribed")) == 2)
    await publish(user.id, 2)
    await rec.wait_for(lambda: len(rec.publications.get(channel, [])) == 2)
    old_epoch = rec.subscribed(channel)[0].stream_position.epoch
    await client.disconnect()

    # This test's Redis database only: FLUSHALL would also wipe the other xdist worker's
    # database, and any other on the same server (a developer's own)
    redis_client.flushdb()
    await client.connect()
    try:
        await rec.wait_for(lambda: len(rec.subscribed(channel)) == 2)
        again = rec.subscribed(channel)[1]
        assert again.was_recovering and not again.recovered
        assert again.stream_position.epoch != old_epoch
        assert again.stream_position.offset == 0
        # the new epoch's stream starts at offset 1 and is delivered live
        await publish(user.id, 1)
        await rec.wait_for(lambda: len(rec.publications[channel]) == 3)
        assert rec.publications[channel][-1].offset == 1
    finally:
        await client.disconnect()


async def test_rpc_unknown_method_is_an_error_and_the_connection_stays(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    client, _rec = make_client(gateway, issue_access_token(user))
    await client.connect()
    try:
        with pytest.raises(ReplyError) as err:
            await client.rpc("v1.nope", {})
        assert err.value.code == 104
        assert err.value.message.startswith("method_not_found:")
        with pytest.raises(ReplyError) as err:
            await client.publish("anything", {"x": 1})
        assert err.value.code == 108
        assert client.state == ClientState.CONNECTED
    finally:
        await client.disconnect()


async def test_history_gives_the_subscription_position_and_refuses_other_channels(
    gateway, make_user
) -> None:
    user = await sync_to_async(make_user)()
    await publish(user.id, 4)
    client, rec = make_client(gateway, issue_access_token(user))
    await client.connect()
    try:
        await rec.wait_for(lambda: len(rec.of("subscribed")) == 2)
        pos = rec.subscribed(keys.topic_channel(user.id))[0].stream_position
        hist = await client.history(keys.topic_channel(user.id), limit=0)
        assert (hist.offset, hist.epoch) == (pos.offset, pos.epoch) == (4, pos.epoch)
        assert hist.publications == []
        with pytest.raises(ReplyError) as err:
            await client.history(keys.topic_channel(user.id + 1000), limit=0)
        assert err.value.code == 103
    finally:
        await client.disconnect()


async def test_invalid_token_is_refused_without_reconnect(gateway, make_user) -> None:
    client, rec = make_client(gateway, "not-a-jwt")
    await client.connect()
    await rec.wait_for(lambda: rec.of("disconnected"))
    assert rec.of("disconnected")[0].code == 3500
    await asyncio.sleep(1)
    assert len(rec.of("connecting")) == 1  # no reconnect attempt
    assert client.state == ClientState.DISCONNECTED


async def test_expired_token_is_refreshed_through_get_token(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    calls = []

    async def get_token() -> str:
        calls.append(1)
        return issue_access_token(user)

    expired = issue_access_token(user, lifetime=timedelta(seconds=-120))
    client, rec = make_client(gateway, expired, get_token=get_token)
    await client.connect()
    try:
        await rec.wait_for(lambda: rec.of("connected"))
        assert calls == [1]
    finally:
        await client.disconnect()


async def test_expired_token_without_get_token_ends_unauthorized(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    expired = issue_access_token(user, lifetime=timedelta(seconds=-120))
    client, rec = make_client(gateway, expired)
    await client.connect()
    await rec.wait_for(lambda: rec.of("disconnected"))
    assert rec.of("disconnected")[0].code == 1
    assert any(getattr(e.error, "code", None) == 109 for e in rec.of("error"))


async def test_token_refresh_keeps_the_connection_past_expiry(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    refreshed = []

    async def get_token() -> str:
        refreshed.append(time.time())
        return issue_access_token(user, lifetime=timedelta(minutes=5))

    # SIMPLE_JWT leeway is 30 s, so "expires in 3 s" is exp = now + 3 s - 30 s... use ttl logic:
    short = issue_access_token(user, lifetime=timedelta(seconds=3))
    client, rec = make_client(gateway, short, get_token=get_token)
    await client.connect()
    try:
        await rec.wait_for(lambda: rec.of("connected"))
        await asyncio.sleep(5)
        assert refreshed, "the client was asked to refresh"
        assert client.state == ClientState.CONNECTED
        assert len(rec.of("connected")) == 1  # never dropped
        assert await client.rpc("v1.session.list", {}) is not None
    finally:
        await client.disconnect()


async def test_keepalive_survives_several_ping_intervals(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    client, rec = make_client(gateway, issue_access_token(user), max_server_ping_delay=2)
    await client.connect()
    try:
        await rec.wait_for(lambda: rec.of("connected"))
        await asyncio.sleep(3 * PING + 1)
        assert len(rec.of("connecting")) == 1 and len(rec.of("connected")) == 1
    finally:
        await client.disconnect()
