"""Sends to the channel layer from synchronous code (``rtcagent.layer``), on the real Redis."""

from __future__ import annotations

import asyncio
import threading

import pytest
from channels.layers import get_channel_layer

from rtcagent import layer


async def _join(group: str) -> str:
    channel = await get_channel_layer().new_channel()
    await get_channel_layer().group_add(group, channel)
    return channel


async def _receive(channel: str, count: int) -> list[int]:
    got = []
    async with asyncio.timeout(20):
        while len(got) < count:
            got.append((await get_channel_layer().receive(channel))["n"])
    return got


def test_sends_that_do_not_wait_still_arrive_in_each_threads_order() -> None:
    groups = ["order-a", "order-b"]
    channels = {g: asyncio.run(_join(g)) for g in groups}

    def sender(group: str) -> None:
        for n in range(150):
            layer.group_send(group, {"type": "x", "n": n})

    threads = [threading.Thread(target=sender, args=(g,)) for g in groups]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    layer.flush(10)
    for group in groups:
        assert asyncio.run(_receive(channels[group], 150)) == list(range(150))


def test_a_waiting_send_raises_its_error_and_one_that_does_not_wait_logs_it(caplog) -> None:
    channel = asyncio.run(_join("waited"))
    layer.group_send("waited", {"type": "x", "n": 7}, wait=True)
    assert asyncio.run(_receive(channel, 1)) == [7]
    with pytest.raises(TypeError):  # channels refuses the name: the caller that waits hears it
        layer.group_send("no spaces allowed", {"type": "x"}, wait=True)
    layer.group_send("no spaces allowed", {"type": "x"})  # returns at once: logged instead
    layer.flush(10)
    assert any("channel-layer send to no spaces allowed failed" in r.getMessage()
               for r in caplog.records)
