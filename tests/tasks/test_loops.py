"""Loops: creation and its limits, the scheduler running each due tick once (many workers at
the same moment, a Redis that lost its keys, a worker that died holding a claim), skips, the
end at max_runs, and stops."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from apps.gateway.models import TopicEvent
from apps.sessions.models import Message, SessionStatus
from apps.tasks import loops, scheduler
from apps.tasks.models import Loop, LoopRun
from rtcagent.errors import InvalidRequest, InvalidState, NotFound
from rtcagent.redis import get_redis
from tests.sessions.factories import make_message, make_session
from tests.tasks.helpers import complete_turn, until, updates_of, waiting

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _short_intervals(settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "LOOP_MIN_INTERVAL_SECONDS": 1}


def _loop(session, **fields) -> Loop:
    args = {"prompt": "check the deploy", "interval_seconds": 60, "max_runs": 3,
            "run_now": True, **fields}
    return loops.loop_create(user_id=session.user_id, session_id=session.id, **args).loop


def _at(loop: Loop, tick: int, extra: float = 0.0):
    return loop.anchor_at + timedelta(seconds=loop.interval_seconds * tick + extra)


def _start_turns(session) -> None:
    """Every waiting message of the session gets its turn (as the worker would)."""
    for m in waiting(session):
        complete_turn(session, m)


def test_a_loop_created_by_the_user_is_due_at_once(session) -> None:
    loop = _loop(session)
    assert (loop.status, loop.runs, loop.next_tick) == ("active", 0, 0)
    assert loop.next_run_at == loop.anchor_at
    later = _loop(session, run_now=False)  # the agent's: one interval from now
    assert later.next_run_at == later.anchor_at + timedelta(seconds=60)
    assert [u["action"] for u in updates_of(session.user, "loop")] == ["created", "created"]


@pytest.mark.parametrize(("fields", "error"), [
    ({"prompt": "  "}, "prompt: required"),
    ({"prompt": "x" * 4001}, "prompt: at most 4000 characters"),
    ({"interval_seconds": 0}, "interval_seconds: must be an integer from 1 to 604800"),
    ({"interval_seconds": 604801}, "interval_seconds"),
    ({"interval_seconds": 1.5}, "interval_seconds"),
    ({"max_runs": 0}, "max_runs: must be an integer from 1 to 1000"),
    ({"max_runs": 1001}, "max_runs"),
])
def test_bad_loops_are_refused_and_nothing_is_written(session, fields, error) -> None:
    with pytest.raises(InvalidRequest, match=error):
        _loop(session, **fields)
    assert not Loop.objects.exists() and not TopicEvent.objects.exists()


def test_the_minimum_interval_is_a_setting(session, settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "LOOP_MIN_INTERVAL_SECONDS": 60}
    with pytest.raises(InvalidRequest, match="from 60 to"):
        _loop(session, interval_seconds=59)


def test_active_loops_per_user_are_capped(session, settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "LOOP_MAX_ACTIVE_PER_USER": 2}
    first = _loop(session)
    _loop(make_session(session.user))
    with pytest.raises(InvalidRequest, match="at most 2 active loops"):
        _loop(session)
    loops.loop_stop(user_id=session.user_id, loop_id=first.id)
    _loop(session)  # a stopped loop frees its slot
    assert Loop.objects.filter(status="active").count() == 2


def test_loops_of_closed_or_foreign_sessions_are_refused(session, make_user) -> None:
    with pytest.raises(NotFound):
        loops.loop_create(user_id=make_user().id, session_id=session.id, prompt="p",
                          interval_seconds=60)
    session.status = SessionStatus.CLOSED
    session.save()
    with pytest.raises(InvalidState):
        _loop(session)
    assert not Loop.objects.exists() and not TopicEvent.objects.exists()


def test_a_due_tick_sends_the_prompt_once(session) -> None:
    loop = _loop(session)
    assert scheduler.tick(_at(loop, 0, 1)) == 1
    assert scheduler.tick(_at(loop, 0, 2)) == 0  # the same tick again: taken
    (msg,) = Message.objects.filter(session=session)
    assert msg.client_id == f"loop:{loop.id}:0" and msg.role == "user"
    assert msg.content["data"] == {"text": "check the deploy",
                                   "origin": {"kind": "loop", "id": str(loop.id), "tick": 0}}
    loop.refresh_from_db()
    assert (loop.runs, loop.next_tick, loop.next_run_at) == (1, 1, _at(loop, 1))
    (run,) = LoopRun.objects.all()
    assert (run.tick, run.status, run.message_id) == (0, "sent", msg.id)
    assert updates_of(session.user, "loop")[-1]["runs"] == 1


@pytest.mark.django_db(transaction=True)
def test_many_workers_at_the_same_moment_run_a_tick_once(session) -> None:
    loop = _loop(session)
    now = _at(loop, 0, 1)
    sent: list[int] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        try:
            barrier.wait()
            sent.append(scheduler.tick(now))
            get_redis().flushdb()  # Redis loses every claim: the database still decides
            sent.append(scheduler.tick(now))
        finally:
            connection.close()

    workers = [threading.Thread(target=worker) for _ in range(8)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(30)
    assert sum(sent) == 1
    assert LoopRun.objects.count() == 1 and Message.objects.count() == 1


def test_a_claim_left_by_a_dead_worker_frees_the_tick_when_it_expires(session) -> None:
    loop = _loop(session)
    r = get_redis()
    r.set(scheduler.tick_key(loop.id, 0), "dead-worker", px=60_000)
    assert scheduler.tick(_at(loop, 0, 1)) == 0 and not LoopRun.objects.exists()
    r.pexpire(scheduler.tick_key(loop.id, 0), 1)
    r.delete(scheduler.tick_key(loop.id, 0))  # what the expiry does
    assert scheduler.tick(_at(loop, 0, 1)) == 1


def test_the_loop_finishes_after_max_runs(session) -> None:
    loop = _loop(session, max_runs=2)
    for k in range(4):
        scheduler.tick(_at(loop, k, 1))
        _start_turns(session)
    loop.refresh_from_db()
    assert (loop.status, loop.runs, loop.next_run_at) == ("finished", 2, None)
    assert list(LoopRun.objects.values_list("tick", "status")) == [(0, "sent"), (1, "sent")]
    assert updates_of(session.user, "loop")[-1]["status"] == "finished"


def test_a_tick_is_skipped_while_the_previous_run_waits(session) -> None:
    loop = _loop(session)
    scheduler.tick(_at(loop, 0, 1))
    scheduler.tick(_at(loop, 1, 1))  # tick 0's message has not started its turn
    _start_turns(session)
    scheduler.tick(_at(loop, 2, 1))
    runs = list(LoopRun.objects.order_by("tick").values_list("tick", "status", "reason"))
    assert runs == [(0, "sent", ""), (1, "skipped", "the previous run has not started yet"),
                    (2, "sent", "")]
    loop.refresh_from_db()
    assert loop.runs == 2 and Message.objects.count() == 2


def test_missed_ticks_are_not_made_up(session) -> None:
    loop = _loop(session, max_runs=10)
    assert scheduler.tick(_at(loop, 5, 1)) == 1  # the workers were down for five intervals
    (run,) = LoopRun.objects.all()
    loop.refresh_from_db()
    assert run.tick == 5 and (loop.next_tick, loop.runs) == (6, 1)
    assert scheduler.tick(_at(loop, 5, 30)) == 0


def test_a_tick_beyond_the_users_caps_is_skipped(session, settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "MAX_TURNS_PER_HOUR": 1}
    make_message(make_session(session.user), client_id="c-1",
                 content={"type": "text", "data": "queued"})
    loop = _loop(session)
    assert scheduler.tick(_at(loop, 0, 1)) == 0
    (run,) = LoopRun.objects.all()
    assert run.status == "skipped" and run.reason.startswith("too many turns")
    loop.refresh_from_db()
    assert (loop.status, loop.runs, loop.next_tick) == ("active", 0, 1)


def test_a_loop_whose_session_was_closed_stops(session) -> None:
    loop = _loop(session)
    session.status = SessionStatus.CLOSED
    session.save()
    scheduler.tick(_at(loop, 0, 1))
    loop.refresh_from_db()
    assert (loop.status, loop.stop_reason, loop.next_run_at) == (
        "stopped", "the session was closed", None)
    assert not Message.objects.exists()


def test_a_stopped_loop_runs_no_more_and_a_second_stop_changes_nothing(session) -> None:
    loop = _loop(session)
    change = loops.loop_stop(user_id=session.user_id, loop_id=loop.id)
    assert (change.loop.status, change.loop.next_run_at) == ("stopped", None)
    assert len(change.updates) == 1
    assert scheduler.tick(_at(loop, 3)) == 0 and not LoopRun.objects.exists()
    again = loops.loop_stop(user_id=session.user_id, loop_id=loop.id)
    assert again.updates == [] and again.loop.status == "stopped"


def test_another_users_loop_is_not_found(session, make_user) -> None:
    loop = _loop(session)
    with pytest.raises(NotFound, match="loop"):
        loops.loop_stop(user_id=make_user().id, loop_id=loop.id)
    with pytest.raises(NotFound, match="loop"):
        loops.loop_stop(user_id=session.user_id, loop_id="not-a-uuid")
    loop.refresh_from_db()
    assert loop.status == "active"


def test_a_tick_not_yet_due_is_not_run(session) -> None:
    loop = _loop(session, run_now=False)
    assert scheduler.tick(timezone.now()) == 0
    assert loops.loop_run_tick(loop_id=loop.id, tick=1, now=_at(loop, 1, -1)) is None
    assert not LoopRun.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_scheduler_thread_keeps_time_until_stopped(session) -> None:
    loop = _loop(session)  # due at once
    stopping = threading.Event()
    thread = threading.Thread(target=scheduler.run_forever, args=(stopping, 0.02), daemon=True)
    thread.start()
    try:
        until(lambda: LoopRun.objects.filter(loop=loop).exists())
    finally:
        stopping.set()
        thread.join(10)
    assert not thread.is_alive()
    assert Message.objects.filter(client_id=f"loop:{loop.id}:0").count() == 1


def test_the_claim_key_format_is_pinned() -> None:
    # Claims of running workers must keep meaning the same across a deploy.
    assert scheduler.tick_key("4f1c", 7) == "rtc:loop:{4f1c}:tick:7"
