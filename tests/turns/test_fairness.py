"""Fairness between users: the queue serves users round robin (real Redis), and a user's sends
are capped (queued turns, turns per hour) with ``rate_limited`` and nothing stored."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from apps.gateway import livebus, stream
from apps.gateway.models import TopicEvent
from apps.gateway.protocol import app_error
from apps.sessions.models import Message, Session
from apps.sessions.services import message_send, session_fork
from apps.turns import queue
from apps.turns.models import Turn
from apps.turns.services import turn_transition
from rtcagent.errors import ClientIdConflict, RateLimited
from rtcagent.redis import get_redis
from tests.sessions.factories import call, make_message, make_rtc, make_session, make_turn
from tests.turns.test_queue import _drain as _serve  # take and ack until take says None

LEASE = 10_000


def _backlog(user_id: int, *, sessions: int, per_session: int, prefix: str) -> list[str]:
    sids = [f"{prefix}{s:02d}" for s in range(sessions)]
    for n in range(per_session):
        for sid in sids:
            queue.enqueue_message(sid, f"{sid}-m{n}", user_id=user_id)
    return sids


def _ids(work: list[dict[str, Any]]) -> list[str]:
    return [w["message_id"] for w in work]


def test_a_newcomer_is_claimed_within_one_round_of_another_users_backlog(
    redis_client: Any,
) -> None:
    a_sessions = _backlog(1, sessions=30, per_session=10, prefix="a")
    queue.enqueue_message("b", "hello", user_id=2)

    claimed = [queue.claim(lease_ms=LEASE) for _ in range(2)]  # two users: one round

    assert "b" in [h.session_id for h in claimed if h is not None]
    served: dict[str, list[str]] = {}
    for hold in claimed:
        assert hold is not None
        served.setdefault(hold.session_id, []).extend(_ids(_serve(hold)))
    assert served["b"] == ["hello"]
    # A alone now: its holds drain whole sessions, and every one of them is served, in order.
    while (hold := queue.claim(lease_ms=LEASE)) is not None:
        served.setdefault(hold.session_id, []).extend(_ids(_serve(hold)))
    assert sorted(served) == sorted([*a_sessions, "b"])
    for sid in a_sessions:
        assert served[sid] == [f"{sid}-m{n}" for n in range(10)]
    assert redis_client.zcard(queue.READY) == 0


def test_the_wait_is_bounded_by_the_number_of_users_not_by_the_backlogs(
    redis_client: Any,
) -> None:
    for user in range(1, 6):  # five users with 100 messages each
        _backlog(user, sessions=10, per_session=10, prefix=f"u{user}-")
    queue.enqueue_message("newcomer", "hello", user_id=99)

    order = []
    for _ in range(6):
        hold = queue.claim(lease_ms=LEASE)
        assert hold is not None
        order.append(hold.session_id)
        assert hold.take() is not None
        assert hold.ack() is True

    assert "newcomer" in order
    # One session per user and round: the five users' first sessions and the newcomer.
    assert sorted(order) == sorted([*(f"u{user}-00" for user in range(1, 6)), "newcomer"])


def test_a_holder_gives_way_after_its_item_when_another_user_arrives(redis_client: Any) -> None:
    a_sessions = _backlog(1, sessions=30, per_session=10, prefix="a")
    busy = queue.claim(lease_ms=LEASE)
    assert busy is not None and busy.session_id == a_sessions[0]
    assert busy.take() == {"kind": "message", "message_id": "a00-m0"}

    queue.enqueue_message("b", "hello", user_id=2)  # while A's turn runs
    assert busy.ack() is True

    assert busy.take() is None  # the next item waits: B is due first
    assert busy.yielded is True and busy.lost is False
    assert queue.is_held("a00") is False
    assert queue.pending("a00") == {"resume": 0, "msg": 9, "inflight": 0}
    nxt = queue.claim(lease_ms=LEASE)
    assert nxt is not None and nxt.session_id == "b"
    assert _ids(_serve(nxt)) == ["hello"]
    assert nxt.yielded is False
    # a00 went to the back of A's round: the other sessions of A come first.
    after = queue.claim(lease_ms=LEASE)
    assert after is not None and after.session_id == "a01"


def test_without_another_user_a_holder_keeps_draining(redis_client: Any) -> None:
    _backlog(1, sessions=3, per_session=4, prefix="a")
    hold = queue.claim(lease_ms=LEASE)
    assert hold is not None

    assert _ids(_serve(hold)) == [f"{hold.session_id}-m{n}" for n in range(4)]
    assert hold.yielded is False


def test_the_first_item_of_a_hold_is_always_handed_out(redis_client: Any) -> None:
    queue.enqueue_message("a", "a-1", user_id=1)
    queue.enqueue_message("b", "b-1", user_id=2)
    queue.enqueue_message("b", "b-2", user_id=2)
    first = queue.claim(lease_ms=LEASE)
    assert first is not None and first.session_id == "a"
    queue.enqueue_message("a", "a-2", user_id=1)  # while held

    assert first.take() == {"kind": "message", "message_id": "a-1"}  # B waits, yet progress
    assert first.ack() is True
    assert first.take() is None and first.yielded is True
    second = queue.claim(lease_ms=LEASE)
    assert second is not None and second.session_id == "b"
    assert second.take() == {"kind": "message", "message_id": "b-1"}
    assert second.ack() is True
    assert second.take() is None and second.yielded is True  # A's turn again
    assert _ids(_serve(queue.claim(lease_ms=LEASE))) == ["a-2"]
    assert _ids(_serve(queue.claim(lease_ms=LEASE))) == ["b-2"]


def test_resume_items_keep_their_priority_across_a_yield(redis_client: Any) -> None:
    queue.enqueue_message("a", "a-1", user_id=1)
    queue.enqueue_message("a", "a-2", user_id=1)
    hold = queue.claim(lease_ms=LEASE)
    assert hold is not None and hold.take() == {"kind": "message", "message_id": "a-1"}
    queue.enqueue_resume("a", "t-1")  # no user given: the recorded owner is used
    queue.enqueue_message("b", "b-1", user_id=2)
    assert hold.ack() is True

    assert hold.take() is None and hold.yielded is True

    assert _ids(_serve(queue.claim(lease_ms=LEASE))) == ["b-1"]
    again = queue.claim(lease_ms=LEASE)
    assert again is not None and again.session_id == "a"
    assert _serve(again) == [
        {"kind": "resume", "turn_id": "t-1"}, {"kind": "message", "message_id": "a-2"},
    ]


def test_an_unacked_item_survives_a_yield_at_the_head_of_its_list(redis_client: Any) -> None:
    queue.enqueue_message("a", "a-1", user_id=1)
    queue.enqueue_message("a", "a-2", user_id=1)
    hold = queue.claim(lease_ms=LEASE)
    assert hold is not None and hold.take() == {"kind": "message", "message_id": "a-1"}
    queue.enqueue_message("b", "b-1", user_id=2)

    assert hold.take() is None and hold.yielded is True  # not acked: a-1 goes back

    assert [json.loads(x)["message_id"] for x in redis_client.lrange(queue._k("a", "msg"), 0, -1)
            ] == ["a-1", "a-2"]
    assert queue.pending("a")["inflight"] == 0


def test_work_enqueued_into_a_held_session_does_not_push_its_owner_back(
    redis_client: Any,
) -> None:
    # A chats in one session: each message arrives while the previous turn runs.
    queue.enqueue_message("a-chat", "c-0", user_id=1)
    hold = queue.claim(lease_ms=LEASE)
    assert hold is not None
    for n in range(1, 50):
        assert hold.take() is not None
        queue.enqueue_message("a-chat", f"c-{n}", user_id=1)
        assert hold.ack() is True
    assert _ids(_serve(hold)) == ["c-49"]
    # Then C dumps a backlog, and A sends in another session: A is still due in the next round.
    _backlog(3, sessions=10, per_session=5, prefix="c")
    queue.enqueue_message("a-other", "o-1", user_id=1)

    first_two = [queue.claim(lease_ms=LEASE) for _ in range(2)]

    assert "a-other" in [h.session_id for h in first_two if h is not None]


def test_the_owner_is_recorded_and_a_session_without_one_shares_a_bucket(
    redis_client: Any,
) -> None:
    queue.enqueue_message("s1", "m1", user_id=42)
    queue.enqueue_resume("s1", "t1")
    queue.enqueue("anon", {"n": 1})

    assert redis_client.get(queue._k("s1", "user")) == "42"
    assert 0 < redis_client.ttl(queue._k("s1", "user")) <= queue.OWNER_TTL
    assert redis_client.get(queue._k("anon", "user")) is None
    assert redis_client.get(queue._u("42", "last")) == "0"
    assert redis_client.get(queue._u("_", "last")) == "0"


# --- per-user caps on v1.message.send (real services, database and Redis) ---------------------


def _send(user: Any, n: int, *, session: Any = None, client_id: str | None = None) -> Any:
    return message_send(
        user_id=user.pk, device_id="", content={"type": "text", "data": f"message {n}"},
        client_id=client_id or f"c-{user.pk}-{n}", server_session_id=session and session.id,
    )


def _stored(user: Any) -> dict[str, Any]:
    """Everything a send may write for ``user``, to check that a refusal wrote nothing."""
    livebus.sync()  # earlier sends' offsets settled (with their bells)
    return {
        "sessions": Session.objects.filter(user=user).count(),
        "messages": Message.objects.filter(user=user).count(),
        "turns": Turn.objects.filter(user=user).count(),
        "topic": TopicEvent.objects.filter(user=user).count(),
        "position": stream.position(user.pk),
        "queue": sorted(get_redis().keys("rtc:q:*")),
    }


def _refused(user: Any, n: int, capture: Any, **kwargs: Any) -> RateLimited:
    before = _stored(user)
    with capture() as callbacks, pytest.raises(RateLimited) as refused:
        _send(user, n, **kwargs)
    assert callbacks == []  # no enqueue was scheduled
    assert _stored(user) == before
    return refused.value


@pytest.mark.django_db
def test_the_send_beyond_the_queued_cap_is_rate_limited_and_stores_nothing(
    make_user: Any, django_capture_on_commit_callbacks: Any,
) -> None:
    user = make_user()
    sent = []
    with django_capture_on_commit_callbacks(execute=True):
        for n in range(20):  # new sessions and one long session alike
            sent.append(_send(user, n, session=sent[0].session if n % 2 and sent else None))
    assert _stored(user)["messages"] == 20

    error = _refused(user, 20, django_capture_on_commit_callbacks)
    again = _refused(user, 21, django_capture_on_commit_callbacks, session=sent[0].session)

    for exc in (error, again):
        assert (exc.code, exc.slug, exc.temporary) == (429, "rate_limited", True)
        assert exc.details == {"retry_after": 5, "limit": "queued_turns", "max": 20}
    wire = app_error(7, error)
    assert wire["error"]["code"] == 429 and wire["error"]["temporary"] is True
    assert wire["error"]["message"].startswith("rate_limited: ")
    assert wire["error"]["message"].endswith(
        ' | {"retry_after":5,"limit":"queued_turns","max":20}'
    )
    # Another user is not affected.
    other = make_user()
    assert _send(other, 0).message.user_id == other.pk


@pytest.mark.django_db
def test_a_started_turn_frees_a_queued_slot(
    make_user: Any, django_capture_on_commit_callbacks: Any,
) -> None:
    user = make_user()
    sent = [_send(user, n) for n in range(20)]
    _refused(user, 20, django_capture_on_commit_callbacks)

    # the first message's turn (created with it, pending) starts, as the worker starts it
    turn_transition(turn_id=sent[0].turn.id, to="running")

    assert _send(user, 20).message.content == {"type": "text", "data": "message 20"}


@pytest.mark.django_db
def test_fork_copies_deleted_messages_and_engine_messages_are_not_queued_turns(
    make_user: Any, django_capture_on_commit_callbacks: Any,
) -> None:
    user = make_user()
    history = make_session(user)
    for n in range(30):
        make_message(history, text=f"copy {n}", client_id="")  # fork copies have no client_id
        make_message(history, text=f"engine {n}", client_id=f"turn:x:{n}:markdown")
    gone = make_session(user, deleted_at=timezone.now())
    for n in range(25):
        make_message(gone, text=f"never started {n}", client_id=f"gone-{n}")
    withdrawn = make_session(user)
    for n in range(25):
        make_message(withdrawn, text=f"deleted {n}", client_id=f"del-{n}",
                     deleted_at=timezone.now())

    sent = [_send(user, n) for n in range(20)]

    assert len(sent) == 20
    _refused(user, 20, django_capture_on_commit_callbacks)


@pytest.mark.django_db
def test_a_resend_at_the_cap_is_a_client_id_conflict_not_a_refusal(make_user: Any) -> None:
    user = make_user()
    sent = [_send(user, n) for n in range(20)]

    with pytest.raises(ClientIdConflict) as conflict:
        _send(user, 99, client_id=f"c-{user.pk}-3")

    assert conflict.value.details == {
        "session_id": str(sent[3].session.id), "message_id": str(sent[3].message.id),
    }


@pytest.mark.django_db
def test_the_hourly_cap_counts_started_and_queued_turns_and_says_when_to_retry(
    make_user: Any, settings: Any, django_capture_on_commit_callbacks: Any,
) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "MAX_TURNS_PER_HOUR": 6}
    user = make_user()
    session = make_session(user)
    now = timezone.now()
    for minutes_ago in (70, 50, 40, 30, 20):  # the first left the hour: four count
        turn = make_turn(session, status="completed")
        Turn.objects.filter(pk=turn.pk).update(created_at=now - timedelta(minutes=minutes_ago))
    _send(user, 0)  # 4 started + 1 queued
    _send(user, 1)  # 4 + 2 = 6: the cap

    error = _refused(user, 2, django_capture_on_commit_callbacks)

    assert (error.code, error.slug, error.temporary) == (429, "rate_limited", True)
    assert error.details is not None
    assert (error.details["limit"], error.details["max"]) == ("turns_per_hour", 6)
    # The turn started 50 minutes ago leaves the hour in 10 minutes.
    assert 598 <= error.details["retry_after"] <= 600
    Turn.objects.filter(user=user, created_at__lt=now - timedelta(minutes=45)).update(
        created_at=now - timedelta(minutes=61)
    )
    assert _send(user, 2).message.user_id == user.pk


@pytest.mark.django_db
def test_the_caps_are_configurable_and_zero_turns_them_off(
    make_user: Any, settings: Any, django_capture_on_commit_callbacks: Any,
) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "MAX_QUEUED_TURNS_PER_USER": 2}
    user = make_user()
    _send(user, 0)
    _send(user, 1)
    assert _refused(user, 2, django_capture_on_commit_callbacks).details == {
        "retry_after": 5, "limit": "queued_turns", "max": 2,
    }

    settings.RTCAGENT = {
        **settings.RTCAGENT, "MAX_QUEUED_TURNS_PER_USER": 0, "MAX_TURNS_PER_HOUR": 0,
    }
    assert len([_send(user, n) for n in range(2, 30)]) == 28


@pytest.mark.django_db
def test_a_fork_beyond_the_cap_is_refused_and_creates_nothing(make_user: Any) -> None:
    user = make_user()
    sent = [_send(user, n) for n in range(20)]
    before = _stored(user)

    with pytest.raises(RateLimited):
        session_fork(
            user_id=user.pk, device_id="", old_session_id=sent[0].session.id,
            old_message_id=sent[0].message.id, new_client_session_id="fork",
            new_client_message_id="fork-1", content={"type": "text", "data": "again"},
        )

    assert _stored(user) == before


@pytest.mark.django_db
def test_tool_results_are_never_refused(
    make_user: Any, django_capture_on_commit_callbacks: Any,
) -> None:
    user = make_user()
    sent = [_send(user, n) for n in range(20)]
    session = sent[0].session
    for status in ("running", "interrupted"):  # the turn created with the message, paused
        turn = turn_transition(turn_id=sent[0].turn.id, to=status)
    rtc = make_rtc(turn)

    with django_capture_on_commit_callbacks(execute=True):
        done = call("v1.rtc.submit_result", user, {"rtc_id": str(rtc.id), "success": True,
                                                   "result": "ok", "client_id": "r-1"})

    assert done["result"]["rtc"]["status"] == "completed"
    assert queue.pending(str(session.id))["resume"] == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_sends_never_exceed_the_cap(make_user: Any, settings: Any) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "MAX_QUEUED_TURNS_PER_USER": 5}
    user = make_user()
    _send(user, 0)
    start = threading.Barrier(8)
    outcomes: list[str] = []

    def send(n: int) -> None:
        try:
            start.wait()
            _send(user, n)
            outcomes.append("sent")
        except RateLimited:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(n,)) for n in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    assert sorted(outcomes) == ["refused"] * 4 + ["sent"] * 4
    assert Message.objects.filter(user=user).count() == 5
