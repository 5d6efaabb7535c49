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
            publisher.publish("bench:live:order", orjson.dumps({"n": n}))
            assert publisher.unread <= livebus._Publisher.MAX_UNREAD
        assert [m["n"] for m in _received(sub, total)] == list(range(total))
    finally:
        publisher.close()
        sub.close()


def test_a_connection_the_server_dropped_is_replaced_on_the_next_frame() -> None:
    publisher = livebus._Publisher()
    sub = _subscribed("bench:live:drop")
    try:
        publisher.publish("bench:live:drop", b'{"n":1}')
        assert _received(sub, 1) == [{"n": 1}]
        publisher._read_replies()
        old = publisher.conn
        old.send_command("CLIENT", "ID")
        assert get_redis().client_kill_filter(_id=int(old.read_response())) == 1
        time.sleep(0.1)
        # Written into the dead socket, or refused at once: either way the frames after it
        # reach the subscriber on a new connection (at most once: this one may be lost).
        publisher.publish("bench:live:drop", b'{"n":2}')
        for n in range(3, 6):
            publisher.publish("bench:live:drop", orjson.dumps({"n": n}))
            time.sleep(0.05)
        got = [m["n"] for m in _received(sub, 4, within=2)]  # 3 when frame 2 was lost
        assert got[-3:] == [3, 4, 5] and set(got) <= {2, 3, 4, 5}
        assert publisher.conn is not old  # replaced, not retried on the dead socket
    finally:
        publisher.close()
        sub.close()
