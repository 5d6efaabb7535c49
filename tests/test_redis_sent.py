"""``rtcagent.redis.Sent``: commands written to the real Redis now, their replies read later
(a round trip overlapping a PostgreSQL statement). What a caller would notice: the replies in
order, errors raised where they are read, and a pool that never runs dry or hands out a
connection with replies still unread on it."""

from __future__ import annotations

import pytest
import redis
from django.conf import settings

from apps.turns import state
from rtcagent import redis as rredis
from rtcagent.redis import Sent, get_redis

pytestmark = pytest.mark.django_db


def test_replies_come_in_order_and_the_connection_goes_back() -> None:
    key = "test:sent:order"
    get_redis().delete(key)
    # more than the pool holds: a connection not given back would exhaust it (a timeout)
    for n in range(settings.RTC_REDIS_MAX_CONNECTIONS * 2):
        sent = Sent([("INCR", key), ("GET", key), ("EXPIRE", key, 60)])
        assert get_redis().ping()  # the pool serves others meanwhile
        assert sent.replies() == [n + 1, str(n + 1), True]
        assert sent.replies() == [n + 1, str(n + 1), True]  # read once, kept
    get_redis().delete(key)


def test_an_error_reply_is_raised_where_read_and_spoils_nothing_after() -> None:
    key = "test:sent:error"
    get_redis().set(key, "text", ex=60)
    sent = Sent([("INCR", key), ("SET", f"{key}:after", "1", "EX", 60)])
    for _ in range(2):
        with pytest.raises(redis.ResponseError):
            sent.replies()
    # the reply left unread went with its connection: the next commands get their own answers
    for _ in range(settings.RTC_REDIS_MAX_CONNECTIONS + 1):
        assert get_redis().get(key) == "text"
    assert get_redis().get(f"{key}:after") == "1"  # sent: it ran
    get_redis().delete(key, f"{key}:after")


def test_a_redis_away_refuses_the_reservation_before_anything_is_written(
    make_user, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The pause's drop of the checkpoint copy, sent with its offset's reservation: a Redis
    that cannot be reached pauses the turn (``CheckpointNotCached``) before its transaction."""
    user = make_user()
    away = redis.Redis(host="127.0.0.1", port=9, socket_connect_timeout=0.2)
    monkeypatch.setattr(rredis, "get_redis", lambda: away)
    with pytest.raises(state.CheckpointNotCached):
        state.invalidate_reserving("t-away", user.id)
    assert "checkpoint of turn t-away: Redis's copy could not be dropped" in caplog.text
