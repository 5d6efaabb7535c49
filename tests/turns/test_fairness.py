"""Fairness between users: the queue serves users round robin (real Redis), and a user's sends
are capped (queued turns, turns per hour) with ``rate_limited`` and nothing stored."""

from __future__ import annotations

import json
from typing import Any

from apps.turns import queue
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
