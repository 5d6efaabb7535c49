"""The session work queue on real Redis: order, hold-lock, leases and sweep, yield, parking, and
two claimers racing over many sessions."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from apps.turns import queue

LONG_LEASE = 10_000
SHORT_LEASE = 50


def _snapshot(r: Any, sid: str) -> dict[str, Any]:
    """Everything the queue keeps about one session, to check that a refusal changed nothing."""
    return {
        "resume": r.lrange(queue._k(sid, "resume"), 0, -1),
        "msg": r.lrange(queue._k(sid, "msg"), 0, -1),
        "inflight": r.get(queue._k(sid, "inflight")),
        "lock": r.get(queue._k(sid, "lock")),
        "parked": r.get(queue._k(sid, "parked")),
        "ready": r.zscore(queue.READY, sid),
        "held": r.zscore(queue.HELD, sid),
    }


def _items(r: Any, sid: str, part: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.lrange(queue._k(sid, part), 0, -1)]


def _claim(*, lease_ms: int = LONG_LEASE) -> queue.Hold:
    hold = queue.claim(lease_ms=lease_ms)
    assert hold is not None
    return hold


def _drain(hold: queue.Hold) -> list[dict[str, Any]]:
    taken = []
    while (work := hold.take()) is not None:
        taken.append(work)
        assert hold.ack() is True
    return taken


def test_key_names_match_the_lua_scripts() -> None:
    assert queue.READY == "rtc:q:ready"
    assert queue.BELL == "rtc:q:bell"
    assert queue.HELD == "rtc:q:held"
    assert queue.VCLOCK == "rtc:q:vclock"
    assert queue._k("s-1", "lock") == "rtc:q:s:{s-1}:lock"
    assert queue._k("s-1", "inflight") == "rtc:q:s:{s-1}:inflight"
    assert queue._k("s-1", "user") == "rtc:q:s:{s-1}:user"
    assert queue._u("7", "last") == "rtc:q:u:{7}:last"


def test_resume_items_are_taken_before_messages_fifo_within_each(redis_client: Any) -> None:
    queue.enqueue("s1", {"n": "m1"})
    queue.enqueue("s1", {"n": "r1"}, resume=True)
    queue.enqueue("s1", {"n": "m2"})
    queue.enqueue("s1", {"n": "r2"}, resume=True)
    assert queue.pending("s1") == {"resume": 2, "msg": 2, "inflight": 0}

    hold = _claim()

    assert hold.session_id == "s1"
    assert _drain(hold) == [{"n": "r1"}, {"n": "r2"}, {"n": "m1"}, {"n": "m2"}]
    assert hold.lost is False
    assert queue.pending("s1") == {"resume": 0, "msg": 0, "inflight": 0}


def test_a_taken_item_stays_inflight_until_acked(redis_client: Any) -> None:
    queue.enqueue("s1", {"n": 1})
    hold = _claim()

    assert hold.take() == {"n": 1}
    assert queue.pending("s1") == {"resume": 0, "msg": 0, "inflight": 1}
    assert json.loads(redis_client.get(queue._k("s1", "inflight"))) == {
        "src": "msg", "item": json.dumps({"n": 1}),
    }

    assert hold.ack() is True
    assert queue.pending("s1") == {"resume": 0, "msg": 0, "inflight": 0}


def test_claimed_session_cannot_be_claimed_by_a_second_claimer_until_released(
    redis_client: Any,
) -> None:
    queue.enqueue("s1", {"n": 1})
    queue.enqueue("s1", {"n": 2})
    first = _claim()

    assert first.session_id == "s1"
    assert queue.is_held("s1") is True
    assert queue.claim(lease_ms=LONG_LEASE) is None

    assert first.take() == {"n": 1}
    assert first.ack() is True
    assert queue.claim(lease_ms=LONG_LEASE) is None  # still held while it has work

    assert first.take() == {"n": 2}
    assert first.ack() is True
    assert first.take() is None  # released
    assert queue.is_held("s1") is False

    queue.enqueue("s1", {"n": 3})
    second = _claim()
    assert second.session_id == "s1"
    assert second.token != first.token
    assert second.take() == {"n": 3}


def test_other_sessions_stay_claimable_while_one_is_held(redis_client: Any) -> None:
    queue.enqueue("s1", {"n": 1})
    queue.enqueue("s2", {"n": 2})
    first = _claim()
    second = _claim()

    assert {first.session_id, second.session_id} == {"s1", "s2"}
    assert queue.claim(lease_ms=LONG_LEASE) is None


def test_take_on_empty_lists_releases_the_lock_and_leaves_ready(redis_client: Any) -> None:
    queue.enqueue("s1", {"n": 1})
    hold = _claim()
    assert hold.take() == {"n": 1}
    queue.enqueue("s1", {"n": 2})  # while held: the session is marked ready again
    assert redis_client.zscore(queue.READY, "s1") is not None
    assert hold.ack() is True
    assert hold.take() == {"n": 2}
    assert hold.ack() is True

    assert hold.take() is None

    assert hold.lost is False
    assert _snapshot(redis_client, "s1") == {
        "resume": [], "msg": [], "inflight": None, "lock": None, "parked": None,
        "ready": None, "held": None,
    }
    assert queue.claim(lease_ms=LONG_LEASE) is None


def test_item_enqueued_after_the_release_makes_the_session_claimable_again(
    redis_client: Any,
) -> None:
    queue.enqueue("s1", {"n": 1})
    hold = _claim()
    assert _drain(hold) == [{"n": 1}]
    assert queue.claim(lease_ms=LONG_LEASE) is None

    queue.enqueue("s1", {"n": 2})

    again = _claim()
    assert again.session_id == "s1"
    assert again.take() == {"n": 2}


def test_item_enqueued_while_held_is_taken_by_the_holder_in_the_same_hold(
    redis_client: Any,
) -> None:
    queue.enqueue("s1", {"n": 1})
    hold = _claim()
    assert hold.take() == {"n": 1}

    queue.enqueue("s1", {"n": 2})
    queue.enqueue("s1", {"n": 3}, resume=True)
    assert queue.claim(lease_ms=LONG_LEASE) is None  # ready again, but held
    assert hold.ack() is True

    assert _drain(hold) == [{"n": 3}, {"n": 2}]
    assert hold.lost is False
    assert queue.is_held("s1") is False


def test_ack_renew_take_with_a_wrong_token_are_refused(redis_client: Any) -> None:
    queue.enqueue("s1", {"n": 1})
    queue.enqueue("s1", {"n": 2})
    hold = _claim()
    assert hold.take() == {"n": 1}
    before = _snapshot(redis_client, "s1")
    intruder = queue.Hold("s1", "not-the-token", LONG_LEASE)

    assert intruder.ack() is False
    assert intruder.renew() is False
    assert intruder.lost is True
    assert intruder.take() is None
    intruder.yield_session()

    assert _snapshot(redis_client, "s1") == before
    assert before["lock"] == hold.token
    assert hold.ack() is True
    assert hold.take() == {"n": 2}


def test_ack_renew_take_after_the_lease_expired_are_refused(redis_client: Any) -> None:
    queue.enqueue("s1", {"n": 1})
    queue.enqueue("s1", {"n": 2})
    hold = _claim(lease_ms=SHORT_LEASE)
    assert hold.take() == {"n": 1}
    time.sleep(SHORT_LEASE * 2 / 1000)
    before = _snapshot(redis_client, "s1")
    assert before["lock"] is None

    assert hold.ack() is False
    assert hold.take() is None
    assert hold.lost is True
    assert hold.renew() is False

    assert _snapshot(redis_client, "s1") == before
    assert queue.pending("s1") == {"resume": 0, "msg": 1, "inflight": 1}


def test_renew_extends_the_lease(redis_client: Any) -> None:
    queue.enqueue("s1", {"n": 1})
    hold = _claim(lease_ms=200)
    hold.lease_ms = LONG_LEASE

    assert hold.renew() is True

    assert redis_client.pttl(queue._k("s1", "lock")) > 200
    assert redis_client.zscore(queue.HELD, "s1") > time.time() * 1000 + 200
    time.sleep(0.25)
    assert hold.take() == {"n": 1}
    assert hold.lost is False


def test_sweep_requeues_the_unacked_item_at_the_head_of_its_list(redis_client: Any) -> None:
    queue.enqueue("s1", {"n": "m1"})
    queue.enqueue("s1", {"n": "m2"})
    dead = _claim(lease_ms=SHORT_LEASE)
    assert dead.take() == {"n": "m1"}
    time.sleep(SHORT_LEASE * 2 / 1000)

    assert queue.sweep() == ["s1"]

    assert _items(redis_client, "s1", "msg") == [{"n": "m1"}, {"n": "m2"}]
    assert queue.pending("s1") == {"resume": 0, "msg": 2, "inflight": 0}
    assert redis_client.zscore(queue.READY, "s1") is not None
    assert redis_client.zscore(queue.HELD, "s1") is None
    assert queue.sweep() == []

    successor = _claim()
    assert successor.session_id == "s1"
    assert _drain(successor) == [{"n": "m1"}, {"n": "m2"}]
    assert dead.ack() is False


def test_sweep_requeues_a_resume_item_into_the_resume_list(redis_client: Any) -> None:
    queue.enqueue("s1", {"n": "m1"})
    queue.enqueue("s1", {"n": "r1"}, resume=True)
    queue.enqueue("s1", {"n": "r2"}, resume=True)
    dead = _claim(lease_ms=SHORT_LEASE)
    assert dead.take() == {"n": "r1"}
    time.sleep(SHORT_LEASE * 2 / 1000)

    assert queue.sweep() == ["s1"]

    assert _items(redis_client, "s1", "resume") == [{"n": "r1"}, {"n": "r2"}]
    assert _items(redis_client, "s1", "msg") == [{"n": "m1"}]
    assert _drain(_claim()) == [{"n": "r1"}, {"n": "r2"}, {"n": "m1"}]


def test_sweep_of_an_expired_holder_without_work_leaves_ready_alone(redis_client: Any) -> None:
    queue.enqueue("s1", {"n": 1})
    dead = _claim(lease_ms=SHORT_LEASE)
    assert dead.take() == {"n": 1}
    assert dead.ack() is True
    time.sleep(SHORT_LEASE * 2 / 1000)

    assert queue.sweep() == ["s1"]

    assert _snapshot(redis_client, "s1") == {
        "resume": [], "msg": [], "inflight": None, "lock": None, "parked": None,
        "ready": None, "held": None,
    }


def test_sweep_leaves_a_live_holder_alone(redis_client: Any) -> None:
    queue.enqueue("s1", {"n": 1})
    queue.enqueue("s1", {"n": 2})
    hold = _claim()
    assert hold.take() == {"n": 1}
    before = _snapshot(redis_client, "s1")

    assert queue.sweep() == []
    # Even when the deadline recorded for the sweeper has passed, a lock that still exists wins.
    redis_client.zadd(queue.HELD, {"s1": 0})
    assert queue.sweep() == []

    after = _snapshot(redis_client, "s1")
    assert {**after, "held": before["held"]} == before
    assert hold.ack() is True
    assert hold.take() == {"n": 2}


def test_claim_after_an_expired_lease_keeps_the_dead_holders_item(redis_client: Any) -> None:
    # The lease ran out, and a message made the session ready again before any sweep ran:
    # the next claimer must see the unacknowledged item first, not overwrite it.
    queue.enqueue("s1", {"n": 1})
    dead = _claim(lease_ms=SHORT_LEASE)
    assert dead.take() == {"n": 1}
    queue.enqueue("s1", {"n": 2})
    time.sleep(SHORT_LEASE * 2 / 1000)

    successor = _claim()

    assert successor.session_id == "s1"
    assert queue.pending("s1") == {"resume": 0, "msg": 2, "inflight": 0}
    assert _drain(successor) == [{"n": 1}, {"n": 2}]
    assert dead.ack() is False
    assert queue.sweep() == []


def test_yield_session_puts_the_session_at_the_back_of_ready(redis_client: Any) -> None:
    # "a" sorts before "b", so a tie in scores could not make this test pass by accident.
    queue.enqueue("a", {"n": "a1"})
    queue.enqueue("a", {"n": "a2"})
    time.sleep(0.002)
    queue.enqueue("b", {"n": "b1"})
    time.sleep(0.002)
    hold = _claim()
    assert hold.session_id == "a"
    assert hold.take() == {"n": "a1"}
    assert hold.ack() is True

    hold.yield_session()

    assert queue.is_held("a") is False
    assert redis_client.zscore(queue.HELD, "a") is None
    assert redis_client.zrange(queue.READY, 0, -1) == ["b", "a"]
    other = _claim()
    assert other.session_id == "b"
    again = _claim()
    assert again.session_id == "a"
    assert _drain(again) == [{"n": "a2"}]
    assert hold.take() is None
    assert hold.lost is True


def test_yield_session_requeues_the_unacked_item_at_the_head(redis_client: Any) -> None:
    queue.enqueue("s1", {"n": 1})
    queue.enqueue("s1", {"n": 2})
    hold = _claim()
    assert hold.take() == {"n": 1}

    hold.yield_session()

    assert queue.pending("s1") == {"resume": 0, "msg": 2, "inflight": 0}
    assert _items(redis_client, "s1", "msg") == [{"n": 1}, {"n": 2}]
    assert redis_client.zscore(queue.READY, "s1") is not None
    assert _drain(_claim()) == [{"n": 1}, {"n": 2}]


def test_yield_session_without_work_releases_and_leaves_ready(redis_client: Any) -> None:
    queue.enqueue("s1", {"n": 1})
    hold = _claim()
    assert hold.take() == {"n": 1}
    assert hold.ack() is True

    hold.yield_session()

    assert _snapshot(redis_client, "s1") == {
        "resume": [], "msg": [], "inflight": None, "lock": None, "parked": None,
        "ready": None, "held": None,
    }


def test_yield_session_with_a_lost_lock_changes_nothing(redis_client: Any) -> None:
    queue.enqueue("s1", {"n": 1})
    queue.enqueue("s1", {"n": 2})
    dead = _claim(lease_ms=SHORT_LEASE)
    assert dead.take() == {"n": 1}
    time.sleep(SHORT_LEASE * 2 / 1000)
    before = _snapshot(redis_client, "s1")

    dead.yield_session()

    assert _snapshot(redis_client, "s1") == before


def test_parked_session_hands_out_resume_items_only(redis_client: Any) -> None:
    queue.enqueue("s1", {"n": "m1"})
    queue.park("s1")
    queue.enqueue("s1", {"n": "r1"}, resume=True)
    queue.enqueue("s1", {"n": "m2"})
    queue.enqueue("s1", {"n": "r2"}, resume=True)
    hold = _claim()

    assert _drain(hold) == [{"n": "r1"}, {"n": "r2"}]

    assert hold.lost is False
    assert _snapshot(redis_client, "s1") == {
        "resume": [], "msg": [json.dumps({"n": "m1"}), json.dumps({"n": "m2"})],
        "inflight": None, "lock": None, "parked": "1", "ready": None, "held": None,
    }
    assert queue.claim(lease_ms=LONG_LEASE) is None


def test_message_enqueued_while_parked_is_not_handed_out(redis_client: Any) -> None:
    queue.park("s1")
    queue.enqueue("s1", {"n": "m1"})
    hold = _claim()  # the message rang the bell, but the holder finds nothing to take

    assert hold.take() is None

    assert queue.is_held("s1") is False
    assert redis_client.zscore(queue.READY, "s1") is None
    assert queue.pending("s1") == {"resume": 0, "msg": 1, "inflight": 0}


def test_unpark_makes_the_session_ready_when_messages_wait(redis_client: Any) -> None:
    queue.park("s1")
    queue.enqueue("s1", {"n": "m1"})
    assert _claim().take() is None
    redis_client.delete(queue.BELL)

    queue.unpark("s1")

    assert redis_client.get(queue._k("s1", "parked")) is None
    assert redis_client.zscore(queue.READY, "s1") is not None
    assert redis_client.lrange(queue.BELL, 0, -1) == ["1"]
    assert _drain(_claim()) == [{"n": "m1"}]


def test_unpark_without_messages_does_not_make_the_session_ready(redis_client: Any) -> None:
    queue.park("s1")

    queue.unpark("s1")

    assert _snapshot(redis_client, "s1") == {
        "resume": [], "msg": [], "inflight": None, "lock": None, "parked": None,
        "ready": None, "held": None,
    }
    assert redis_client.llen(queue.BELL) == 0


def test_unpark_while_held_lets_the_holder_take_the_messages(redis_client: Any) -> None:
    queue.enqueue("s1", {"n": "m1"})
    queue.park("s1")
    queue.enqueue("s1", {"n": "r1"}, resume=True)
    hold = _claim()
    assert hold.take() == {"n": "r1"}

    queue.unpark("s1")

    assert hold.ack() is True
    assert _drain(hold) == [{"n": "m1"}]
    assert hold.lost is False
    assert redis_client.zscore(queue.READY, "s1") is None


def test_requeue_front_puts_the_message_back_at_the_head(redis_client: Any) -> None:
    queue.enqueue("s1", {"n": "m1"})
    queue.enqueue("s1", {"n": "m2"})
    hold = _claim()
    work = hold.take()
    assert work == {"n": "m1"}

    # What the worker does when the database says another turn is still open.
    queue.park("s1")
    queue.requeue_front("s1", work)
    assert hold.ack() is True
    assert hold.take() is None

    assert _items(redis_client, "s1", "msg") == [{"n": "m1"}, {"n": "m2"}]
    assert queue.pending("s1") == {"resume": 0, "msg": 2, "inflight": 0}
    assert queue.claim(lease_ms=LONG_LEASE) is None

    queue.unpark("s1")
    assert _drain(_claim()) == [{"n": "m1"}, {"n": "m2"}]


def _race(
    redis_client: Any, *, sessions: int, per_session: int, max_items: int, users: int = 0,
    take: bool = False,
) -> None:
    """Two claimers loop over the queue while a producer enqueues the second half of the work;
    each item is "processed" briefly while the session is held. With ``users`` the sessions
    belong to that many owners, so holds also give way to other users inside ``take``. With
    ``take`` each claim takes its first item too, as the worker's do (``claim(take=True)``)."""

    def owner(s: int) -> int | None:
        return s % users if users else None

    for n in range(per_session // 2):
        for s in range(sessions):
            queue.enqueue(f"s{s:02d}", {"s": s, "n": n}, user_id=owner(s))
    mu = threading.Lock()
    active: set[str] = set()
    processed: list[tuple[int, int]] = []
    overlaps: list[str] = []
    lost: list[str] = []
    gave_way: list[str] = []
    errors: list[BaseException] = []
    total = sessions * per_session
    deadline = time.monotonic() + 15

    def produce() -> None:
        for n in range(per_session // 2, per_session):
            for s in range(sessions):
                queue.enqueue(f"s{s:02d}", {"s": s, "n": n}, user_id=owner(s))

    def claimer() -> None:
        try:
            while time.monotonic() < deadline:
                with mu:
                    if len(processed) == total:
                        return
                hold = None if take else queue.claim(lease_ms=LONG_LEASE)
                with mu:
                    if take:  # it may let go at once (nothing to take), as a take does
                        hold = queue.claim(lease_ms=LONG_LEASE, take=True)
                    if hold is not None:
                        if hold.session_id in active:
                            overlaps.append(hold.session_id)
                        active.add(hold.session_id)
                if hold is None:
                    time.sleep(0.0005)
                    continue
                for _ in range(max_items):
                    # The session leaves ``active`` under ``mu`` in the same step that releases
                    # its lock, so the other claimer can only see it after that.
                    with mu:
                        work = hold.take()
                        if work is None:
                            active.discard(hold.session_id)
                            break
                        processed.append((work["s"], work["n"]))
                    time.sleep(0.0001)  # the work itself, while the session is held
                    if not hold.ack():
                        lost.append(hold.session_id)
                else:
                    with mu:
                        hold.yield_session()
                        active.discard(hold.session_id)
                if hold.lost:
                    lost.append(hold.session_id)
                if hold.yielded:
                    gave_way.append(hold.session_id)
        except BaseException as exc:  # surfaced by the assertions below
            errors.append(exc)

    threads = [threading.Thread(target=claimer) for _ in range(2)]
    producer = threading.Thread(target=produce)
    for t in [*threads, producer]:
        t.start()
    for t in [*threads, producer]:
        t.join(timeout=20)

    assert errors == []
    assert overlaps == []
    assert lost == []
    assert bool(gave_way) == bool(users)
    assert len(processed) == total
    assert sorted(processed) == [(s, n) for s in range(sessions) for n in range(per_session)]
    for s in range(sessions):  # one holder at a time keeps each session in order
        assert [n for ps, n in processed if ps == s] == list(range(per_session))
    assert redis_client.zcard(queue.READY) == 0
    assert redis_client.zcard(queue.HELD) == 0
    # Only the owner records stay (they expire with OWNER_TTL).
    assert sorted(redis_client.keys("rtc:q:s:*")) == (
        sorted(queue._k(f"s{s:02d}", "user") for s in range(sessions)) if users else []
    )


def test_two_claimers_never_hold_a_session_at_once_and_take_every_item_once(
    redis_client: Any,
) -> None:
    _race(redis_client, sessions=50, per_session=10, max_items=3)


def test_two_claimers_on_one_busy_session_never_hold_it_at_once(redis_client: Any) -> None:
    _race(redis_client, sessions=1, per_session=300, max_items=3)


def test_two_claimers_over_sessions_of_several_users_keep_every_invariant(
    redis_client: Any,
) -> None:
    # Holds now also end inside ``take`` when another user's session is due.
    _race(redis_client, sessions=40, per_session=10, max_items=5, users=4)


def test_claimers_that_take_with_the_claim_keep_every_invariant(redis_client: Any) -> None:
    _race(redis_client, sessions=40, per_session=10, max_items=5, users=4, take=True)


def test_claimers_that_take_with_the_claim_on_one_busy_session(redis_client: Any) -> None:
    _race(redis_client, sessions=1, per_session=200, max_items=3, take=True)


def test_a_claim_that_takes_hands_out_what_its_first_take_would(redis_client: Any) -> None:
    """``claim(take=True)``: one round trip, the same first item as ``claim`` then ``take``:
    a resume before messages, a dead holder's unacknowledged item first, nothing of a parked
    session's messages (the lock let go, as an empty take does)."""
    queue.enqueue("s1", {"n": "m1"})
    queue.enqueue("s1", {"n": "r1"}, resume=True)
    hold = queue.claim(lease_ms=SHORT_LEASE, take=True)
    assert hold is not None and hold.session_id == "s1"
    assert hold.take() == {"n": "r1"}  # taken with the claim: in flight, not acked
    assert queue.pending("s1") == {"resume": 0, "msg": 1, "inflight": 1}
    queue.enqueue("s1", {"n": "m1b"})  # ready again, before any sweep
    time.sleep(SHORT_LEASE * 2 / 1000)  # its holder died

    successor = queue.claim(lease_ms=LONG_LEASE, take=True)
    assert successor is not None and successor.session_id == "s1"
    assert successor.take() == {"n": "r1"}  # the dead holder's item, back at the head
    assert successor.ack() is True
    assert _drain(successor) == [{"n": "m1"}, {"n": "m1b"}]
    assert queue.claim(lease_ms=LONG_LEASE, take=True) is None

    queue.enqueue("s2", {"n": "m2"})
    queue.park("s2")
    queue.enqueue("s2", {"n": "r2"}, resume=True)
    parked = queue.claim(lease_ms=LONG_LEASE, take=True)
    assert parked is not None and parked.take() == {"n": "r2"}
    assert parked.ack() is True
    assert parked.take() is None  # the message waits for the unpark
    empty = queue.claim(lease_ms=LONG_LEASE, take=True)  # still ready: its message waits
    assert empty is None or (empty.take() is None and not empty.lost)
    assert _snapshot(redis_client, "s2")["lock"] is None
    assert _items(redis_client, "s2", "msg") == [{"n": "m2"}]
    queue.unpark("s2")
    assert _drain(_claim()) == [{"n": "m2"}]


def test_wait_for_bell_returns_promptly_after_an_enqueue_in_another_thread(
    redis_client: Any,
) -> None:
    timer = threading.Timer(0.1, queue.enqueue, args=("s1", {"n": 1}))
    started = time.monotonic()
    timer.start()

    queue.wait_for_bell(5)

    elapsed = time.monotonic() - started
    timer.join()
    assert 0.09 <= elapsed < 1.0
    assert queue.pending("s1") == {"resume": 0, "msg": 1, "inflight": 0}


def test_wait_for_bell_returns_at_once_when_work_was_enqueued_before(redis_client: Any) -> None:
    queue.enqueue("s1", {"n": 1})
    started = time.monotonic()

    queue.wait_for_bell(5)

    assert time.monotonic() - started < 0.5
