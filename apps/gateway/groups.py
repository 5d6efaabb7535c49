"""Joining and leaving a connection's channel-layer groups in one Redis round trip.

channels-redis's ``group_add`` is two round trips (``ZADD``, then ``EXPIRE``) and ``group_discard``
one, awaited one after the other: a connect joins three groups, so six round trips before it can
read its topic's position, and 200 clients reconnecting at once queue them on the pool
(docs/performance.md, reconnect burst). Here the same commands, on the same keys with the same
expiry, go out as one pipeline per shard. A layer that is not channels-redis (or a subclass
of it) gets the plain calls.

``sync_joiner`` goes further for a layer on ``REDIS_URL`` itself (the configuration of
``settings.CHANNEL_LAYERS``): the connect's thread hop queues the joins on the synchronous
client's pipeline, ahead of the script that reads the topic's position, so joining and reading
the position are one round trip, and the event loop does none of that work (redis-py's asyncio
pipeline costs several times the synchronous one in Python).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from channels_redis.core import RedisChannelLayer
from django.conf import settings


def _by_shard(layer: RedisChannelLayer, groups: list[str]) -> dict[int, list[str]]:
    shards: dict[int, list[str]] = {}
    for group in groups:
        assert layer.require_valid_group_name(group), "Group name not valid"
        shards.setdefault(layer.consistent_hash(group), []).append(group)
    return shards


async def group_add_many(layer: Any, groups: list[str], channel: str) -> None:
    """``layer.group_add(group, channel)`` for every group, pipelined."""
    if not isinstance(layer, RedisChannelLayer):
        for group in groups:
            await layer.group_add(group, channel)
        return
    assert layer.require_valid_channel_name(channel), "Channel name not valid"
    for index, members in _by_shard(layer, groups).items():
        pipe = layer.connection(index).pipeline(transaction=False)
        _queue_joins(pipe, [layer._group_key(g) for g in members], channel, layer.group_expiry)
        await pipe.execute()


def _queue_joins(pipe: Any, keys: list[str], channel: str, expiry: int) -> None:
    """channels-redis's ``group_add`` for each group key, queued on ``pipe``."""
    now = time.time()
    for key in keys:
        pipe.zadd(key, {channel: now})
        pipe.expire(key, expiry)


async def group_discard_many(layer: Any, groups: list[str], channel: str) -> None:
    """``layer.group_discard(group, channel)`` for every group, pipelined."""
    if not isinstance(layer, RedisChannelLayer):
        for group in groups:
            await layer.group_discard(group, channel)
        return
    for index, members in _by_shard(layer, groups).items():
        pipe = layer.connection(index).pipeline(transaction=False)
        for group in members:
            pipe.zrem(layer._group_key(group), channel)
        await pipe.execute()


def sync_joiner(layer: Any, groups: list[str], channel: str) -> Callable[[Any], None] | None:
    """A function that queues ``group_add_many``'s commands on a synchronous pipeline of
    ``rtcagent.redis.get_redis()``, or None when the layer keeps its groups elsewhere (then
    ``group_add_many`` it is)."""
    if not isinstance(layer, RedisChannelLayer) or len(layer.hosts) != 1:
        return None
    host = layer.hosts[0]
    if not isinstance(host, dict) or host.get("address") != settings.REDIS_URL:
        return None
    assert layer.require_valid_channel_name(channel), "Channel name not valid"
    for group in groups:
        assert layer.require_valid_group_name(group), "Group name not valid"
    keys = [layer._group_key(group) for group in groups]
    return lambda pipe: _queue_joins(pipe, keys, channel, layer.group_expiry)
