"""``apps.gateway.groups``: pipelined joins and leaves are the channel layer's own group
membership (the real Redis layer of the settings)."""

from __future__ import annotations

import asyncio

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from apps.gateway.groups import group_add_many, group_discard_many, sync_joiner
from rtcagent.redis import get_redis


async def _got(layer, channel: str) -> dict | None:
    try:
        async with asyncio.timeout(0.5):
            return await layer.receive(channel)
    except TimeoutError:
        return None


async def test_pipelined_joins_and_leaves_are_group_membership() -> None:
    layer = get_channel_layer()
    channel = await layer.new_channel()
    groups = ["gw-test-a", "gw-test-b"]
    await group_add_many(layer, groups, channel)
    for n, group in enumerate(groups):
        await layer.group_send(group, {"type": "x", "n": n})
        assert (await _got(layer, channel))["n"] == n
    expiry = await sync_to_async(get_redis().ttl)(layer._group_key("gw-test-a"))
    assert 0 < expiry <= layer.group_expiry

    await group_discard_many(layer, groups, channel)
    for group in groups:
        await layer.group_send(group, {"type": "x", "n": 9})
    assert await _got(layer, channel) is None


async def test_the_synchronous_joiner_rides_on_another_pipeline() -> None:
    layer = get_channel_layer()
    channel = await layer.new_channel()
    join = sync_joiner(layer, ["gw-test-c"], channel)
    assert join is not None

    def run() -> list:
        pipe = get_redis().pipeline(transaction=False)
        join(pipe)
        pipe.get("gw-test-unrelated")  # the caller's own commands follow in the same round trip
        return pipe.execute()

    assert (await sync_to_async(run)())[-1] is None
    await layer.group_send("gw-test-c", {"type": "x", "n": 1})
    assert (await _got(layer, channel))["n"] == 1
    await group_discard_many(layer, ["gw-test-c"], channel)


def test_a_layer_elsewhere_gets_no_synchronous_joiner() -> None:
    from channels.layers import InMemoryChannelLayer

    assert sync_joiner(InMemoryChannelLayer(), ["g"], "specific.x!y") is None
