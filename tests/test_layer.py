"""Sends to the channel layer from synchronous code (``rtcagent.layer``), on the real Redis."""

from __future__ import annotations

import asyncio
import threading
import time

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


def test_a_sends_follow_up_runs_after_it_in_order_and_its_failure_is_only_logged(
        caplog) -> None:
    """``then`` (the topic's settle after its bell) runs on the loop after its send, before
    the thread's next send; one that fails is logged and the sends after it still go."""
    channel = asyncio.run(_join("then"))
    seen: list[str] = []

    def follow(n: int, fail: bool = False):
        async def step() -> None:
            seen.append(f"then {n}")
            if fail:
                raise RuntimeError(f"follow-up {n} broke")
        return step

    layer.group_send("then", {"type": "x", "n": 1}, then=follow(1))
    layer.group_send("then", {"type": "x", "n": 2}, then=follow(2, fail=True))
    layer.group_send("then", {"type": "x", "n": 3}, then=follow(3))
    layer.group_send("no spaces allowed", {"type": "x"}, then=follow(4))  # the send fails
    layer.flush(10)
    assert asyncio.run(_receive(channel, 3)) == [1, 2, 3]
    assert seen == ["then 1", "then 2", "then 3", "then 4"]
    assert any("follow-up 2 broke" in r.getMessage() for r in caplog.records)


def test_wait_sent_returns_once_this_threads_sends_are_done_not_others() -> None:
    """``wait_sent`` (a tool call's RTC bell before the answer's accounting): back when the
    calling thread's queued sends and their follow-ups have run; another thread's slow send
    does not hold it up."""
    done: list[str] = []
    other_may_finish = threading.Event()

    def follow(tag: str, delay: float):
        async def step() -> None:
            await asyncio.sleep(delay)
            done.append(tag)
        return step

    def other() -> None:
        layer.group_send("wait-other", {"type": "x", "n": 0},
                         then=lambda: asyncio.to_thread(other_may_finish.wait, 10))

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    started = time.monotonic()
    layer.group_send("wait-mine", {"type": "x", "n": 1}, then=follow("mine 1", 0.2))
    layer.group_send("wait-mine", {"type": "x", "n": 2}, then=follow("mine 2", 0.1))
    layer.wait_sent(5)
    assert done == ["mine 1", "mine 2"]  # both of this thread's, while the other still waits
    # not held up by the other thread's send, which waits until the event (up to 10 s): waiting
    # for it too would have taken wait_sent's whole 5 s
    assert time.monotonic() - started < 4
    other_may_finish.set()
    layer.flush(10)
