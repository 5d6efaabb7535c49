"""The live bus's publisher (``apps.gateway.livebus._Publisher``) on the real Redis: a thread's
own connection, commands written without waiting for their replies. What a subscriber would
notice: every frame, in order; a connection the server dropped costs nothing after it."""

from __future__ import annotations

import time

import orjson
import pytest

from apps.gateway import livebus
from rtcagent.redis import get_redis

pytestmark = pytest.mark.django_db


def _subscribed(channel: str):
    sub = get_redis().pubsub(ignore_subscribe_messages=True)
    sub.subscribe(channel)
    sub.get_message(timeout=1)  # the subscription's confirmation
    return sub


def _received(sub, count: int, within: float = 10) -> list[dict]:
    got, deadline = [], time.monotonic() + within
    while len(got) < count and time.monotonic() < deadline:
        message = sub.get_message(timeout=0.5)
        if message and message["type"] == "message":
            got.append(orjson.loads(message["data"]))
    return got


def test_frames_arrive_in_order_and_replies_never_pile_up() -> None:
    publisher = livebus._Publisher()
    sub = _subscribed("bench:live:order")
    total = livebus._Publisher.MAX_UNREAD * 2 + 10
    try:
        for n in range(total):
            publisher.send([("PUBLISH", "bench:live:order", orjson.dumps({"n": n}))])
            assert publisher.unread <= livebus._Publisher.MAX_UNREAD
        assert [m["n"] for m in _received(sub, total)] == list(range(total))
    finally:
        publisher.close()
        sub.close()


def test_a_connection_the_server_dropped_is_replaced_on_the_next_frame() -> None:
    publisher = livebus._Publisher()
    sub = _subscribed("bench:live:drop")
    try:
        publisher.send([("PUBLISH", "bench:live:drop", b'{"n":1}')])
        assert _received(sub, 1) == [{"n": 1}]
        publisher._read_replies()
        old = publisher.conn
        old.send_command("CLIENT", "ID")
        assert get_redis().client_kill_filter(_id=int(old.read_response())) == 1
        time.sleep(0.1)
        # Written into the dead socket, or refused at once: either way the frames after it
        # reach the subscriber on a new connection (at most once: this one may be lost).
        publisher.send([("PUBLISH", "bench:live:drop", b'{"n":2}')])
        for n in range(3, 6):
            publisher.send([("PUBLISH", "bench:live:drop", orjson.dumps({"n": n}))])
            time.sleep(0.05)
        got = [m["n"] for m in _received(sub, 4, within=2)]  # 3 when frame 2 was lost
        assert got[-3:] == [3, 4, 5] and set(got) <= {2, 3, 4, 5}
        assert publisher.conn is not old  # replaced, not retried on the dead socket
    finally:
        publisher.close()
        sub.close()


@pytest.mark.django_db(transaction=True)  # the bell follows a real commit
def test_a_committed_updates_bell_and_its_settle_leave_together(make_user) -> None:
    """``publish_update`` rings the topic's bell on the user's bus channel once the row
    committed: the Update itself with its epoch and offset, and the offset leaves the pending
    set in the same ``MULTI`` (the watermark reaches it), nothing before the commit."""
    from django.db import transaction

    from apps.gateway import stream
    from apps.gateway.events import item, publish_update

    user = make_user()
    sub = _subscribed(livebus.bus_channel(user.id))
    try:
        with transaction.atomic():
            publish_update(user_id=user.id, items=[item("session", "updated", "s-1")],
                           data_list=[{"id": "s-1"}])
            pending = stream.position(user.id)
            assert pending.watermark < pending.offset  # allocated, not committed yet
            assert sub.get_message(timeout=0.2) is None  # no bell before the commit
        livebus.sync()
        assert stream.position(user.id).watermark == pending.offset
        message = sub.get_message(timeout=5)
        assert message is not None and message["data"].startswith("~")
        bell = orjson.loads(message["data"][1:])
        assert bell["epoch"] == pending.epoch and bell["offset"] == pending.offset
        assert bell["data"]["items"] == [
            {"entity": "session", "action": "updated", "entity_id": "s-1"}]
    finally:
        sub.close()


async def test_the_bus_hands_bells_to_topic_delivery_and_frames_to_the_socket() -> None:
    """One subscription per user carries both: a bell goes to the connection's topic delivery
    (which orders offsets and repairs holes), a live frame straight to its socket; a message
    that is neither is dropped without ending the reader."""
    import asyncio

    from asgiref.sync import sync_to_async

    class Receiver:
        def __init__(self) -> None:
            self.live: list[str] = []
            self.bells: list[dict] = []
            self.all_in = asyncio.Event()

        async def send_live(self, text: str) -> None:
            self.live.append(text)
            self._check()

        async def topic_bell(self, event: dict) -> None:
            self.bells.append(event)
            self._check()

        def _check(self) -> None:
            if len(self.live) == 2 and self.bells:
                self.all_in.set()

    bus, receiver, user_id = livebus.Bus(), Receiver(), 987_654
    await bus.join(user_id, receiver)
    try:
        def send() -> None:
            # not ours (a bell that does not parse): dropped, and the reader goes on
            livebus._publisher().send([("PUBLISH", livebus.bus_channel(user_id), b"~{oops")])
            livebus.publish(user_id, {"delta": "Hel"})
            livebus.ring_bell(user_id, epoch="e1", offset=7, data={"items": []})
            livebus.publish(user_id, {"delta": "lo"})
            livebus.sync()

        await sync_to_async(send, thread_sensitive=False)()
        async with asyncio.timeout(10):
            await receiver.all_in.wait()
        assert [orjson.loads(t)["push"]["pub"]["data"]["delta"] for t in receiver.live] == [
            "Hel", "lo"]
        assert receiver.bells == [{"epoch": "e1", "offset": 7, "data": {"items": []}}]
    finally:
        await bus.leave(user_id, receiver)
        if bus.task is not None:
            bus.task.cancel()
