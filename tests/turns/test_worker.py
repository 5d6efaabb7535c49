"""Worker housekeeping against the real database and Redis (no processes needed)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from apps.sessions.models import Message, Session
from apps.turns import queue, state
from apps.turns.engine import Checkpoint
from apps.turns.models import Turn
from apps.turns.services import turn_stop
from apps.turns.worker import Worker, park_session
from rtcagent.redis import get_redis
from tests.turns.stack import in_process_worker, run_item

pytestmark = [pytest.mark.django_db(transaction=True)]


def _session(user) -> Session:
    return Session.objects.create(user=user)


def test_a_park_without_an_open_turn_is_undone(make_user) -> None:
    session = _session(make_user())
    sid = str(session.id)
    queue.enqueue(sid, {"kind": "message", "message_id": "m"})
    park_session(sid)  # the turn was stopped meanwhile: nothing may keep the message waiting
    hold = queue.claim(lease_ms=5000)
    assert hold is not None and hold.take() == {"kind": "message", "message_id": "m"}


def test_a_park_with_an_open_turn_holds_messages_back(make_user) -> None:
    user = make_user()
    session = _session(user)
    Turn.objects.create(session=session, user=user, status="interrupted")
    sid = str(session.id)
    queue.enqueue(sid, {"kind": "message", "message_id": "m"})
    park_session(sid)
    hold = queue.claim(lease_ms=5000)
    assert hold is None or hold.take() is None
    assert queue.pending(sid)["msg"] == 1


def test_lost_message_items_are_queued_again(make_user) -> None:
    user = make_user()
    session = _session(user)
    old = timezone.now() - timedelta(minutes=1)
    lost = Message.objects.create(session=session, user=user, global_offset=1, role="user",
                                  client_id="c-1", content={"type": "text", "data": "hi"})
    Message.objects.filter(pk=lost.pk).update(created_at=old)
    copy = Message.objects.create(session=session, user=user, global_offset=2, role="user",
                                  client_id="", content={"type": "text", "data": "fork copy"})
    Message.objects.filter(pk=copy.pk).update(created_at=old)
    Worker.queue_orphan_messages(timezone.now())
    hold = queue.claim(lease_ms=5000)
    assert hold is not None and hold.take() == {"kind": "message", "message_id": str(lost.id)}
    assert hold.take() is None  # the fork copy is history, not a request
    Worker.queue_orphan_messages(timezone.now())  # still without a turn, but now it is queued
    assert queue.pending(str(session.id))["msg"] == 1 or queue.is_held(str(session.id))


def test_stop_cancels_a_waiting_turn_and_only_flags_a_running_one(make_user) -> None:
    user = make_user()
    waiting, running = _session(user), _session(user)
    t1 = Turn.objects.create(session=waiting, user=user, status="interrupted")
    t2 = Turn.objects.create(session=running, user=user, status="running")
    get_redis().set(f"rtc:q:s:{{{waiting.id}}}:parked", "1")
    assert turn_stop(user_id=user.id, session_id=waiting.id).status == "cancelled"
    assert not get_redis().exists(f"rtc:q:s:{{{waiting.id}}}:parked")
    assert turn_stop(user_id=user.id, session_id=running.id).status == "running"
    assert state.stop_requested(str(t2.id)) and state.stop_requested(str(t1.id))
    assert Turn.objects.get(pk=t2.id).status == "running"


def test_a_lost_hold_stops_the_stream_without_failing_the_turn(make_user) -> None:
    from apps.turns.llm import OpenAIChat, TextDelta
    from apps.turns.runner import DjangoTurnPorts, HoldLost
    from rtcagent.devtools.scripted_llm import ScriptedLLM

    user = make_user()
    session = _session(user)
    turn = Turn.objects.create(session=session, user=user, status="running")
    lost = {"now": False}
    with ScriptedLLM() as llm:
        llm.enqueue({"content": "x" * 40, "chunk_size": 2, "chunk_delay": 0.02})
        ports = DjangoTurnPorts(turn, OpenAIChat(api_key="k", base_url=llm.base_url),
                                lost=lambda: lost["now"])
        seen = []
        with pytest.raises(HoldLost):  # not an LLMError: nothing may mark the turn failed
            for event in ports.llm.stream([{"role": "user", "content": "hi"}], None,
                                          should_cancel=ports.should_cancel):
                if isinstance(event, TextDelta):
                    seen.append(event.text)
                    lost["now"] = len(seen) >= 3
        assert 3 <= len(seen) < 20
        with pytest.raises(HoldLost):
            ports.save(Checkpoint())
    assert Turn.objects.get(pk=turn.id).status == "running"
    assert state.checkpoint_load(str(turn.id)) is None


def _in_process(llm: Any) -> tuple[Worker, Callable[[], None]]:
    """A worker of this process on the scripted model, and a function that runs its next
    queue item to its end (or its pause)."""
    worker = in_process_worker(llm)

    def run_next() -> None:
        run_item(worker)

    return worker, run_next


def test_a_turns_messages_are_numbered_in_order_across_its_runs(make_user) -> None:
    from apps.rtc.models import Rtc
    from apps.rtc.services import rtc_submit_result
    from apps.sessions.services import message_send
    from rtcagent.devtools.scripted_llm import ScriptedLLM

    user = make_user()
    with ScriptedLLM(api_key="k") as llm:
        _, run_next = _in_process(llm)
        llm.enqueue({"content": "Reading.", "tool_calls": [
            {"name": "read", "arguments": {"path": "/a.md"}}]})
        llm.enqueue({"content": "Done."})
        sent = message_send(user_id=user.id, device_id="d1", client_id="c-1",
                            content={"type": "text", "data": "read it"})
        run_next()
        rtc = Rtc.objects.get(session_id=sent.session.id)
        rtc_submit_result(user_id=user.id, rtc_id=rtc.id, success=True, result="text",
                          client_id="r-1", device_id="d1")
        run_next()
    turn = Turn.objects.get(session_id=sent.session.id)
    assert turn.status == "completed"
    rows = list(Message.objects.filter(turn=turn).order_by("global_offset")
                .values_list("content__type", "turn_offset"))
    # the trigger, the first answer and its call (first run), the result and the answer (resume)
    assert [t for t, _ in rows] == ["text", "markdown", "toolcall_input", "toolcall_output",
                                    "markdown"]
    assert [n for _, n in rows] == [0, 1, 2, 3, 4]


def test_a_worker_killed_between_the_rtcs_commit_and_redis_copy_resumes_waiting_on_it(
    make_user, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint waiting on an RTC is stored in the RTC's transaction and copied to Redis
    after it: a worker killed in between leaves Redis no copy (not the older one), so the next
    run waits on that RTC instead of asking the model again (which might call something else
    and leave the first RTC orphaned)."""
    from apps.rtc.models import Rtc
    from apps.rtc.services import rtc_submit_result
    from apps.sessions.services import message_send
    from rtcagent.devtools.scripted_llm import ScriptedLLM

    class Killed(BaseException):
        pass

    cache = state.checkpoint_cache

    def dies_after_the_commit(turn_id: str, data: dict[str, Any]) -> None:
        if data.get("waiting_rtc"):
            raise Killed
        cache(turn_id, data)

    user = make_user()
    with ScriptedLLM(api_key="k") as llm:
        worker, _ = _in_process(llm)
        llm.enqueue({"tool_calls": [{"name": "read", "arguments": {"path": "/a.md"}}]})
        llm.enqueue({"tool_calls": [{"name": "read", "arguments": {"path": "/other.md"}}]})
        llm.enqueue({"content": "Done."})
        sent = message_send(user_id=user.id, device_id="d1", client_id="c-1",
                            content={"type": "text", "data": "read it"})
        monkeypatch.setattr(state, "checkpoint_cache", dies_after_the_commit)
        hold = queue.claim(lease_ms=30000)
        assert hold is not None
        worker._hold = hold
        with pytest.raises(Killed):
            worker.handle(hold.session_id, hold.take())
        monkeypatch.setattr(state, "checkpoint_cache", cache)
        hold.ack()
        hold.yield_session()

        turn = Turn.objects.get(session_id=sent.session.id)
        (rtc,) = Rtc.objects.filter(turn=turn)
        assert state.checkpoint_load(str(turn.id))["waiting_rtc"] == str(rtc.id)
        assert len(llm.requests) == 1
        rtc_submit_result(user_id=user.id, rtc_id=rtc.id, success=True, result="text",
                          client_id="r-1", device_id="d1")
        worker.run_turn(Turn.objects.get(pk=turn.id))  # what the sweeper's resume runs
        # the result went to the model with the call it answers; the next answer's call is
        # a second RTC, not a replacement of the first
        assert len(llm.requests) == 2
        assert [m["role"] for m in llm.requests[1].body["messages"]][-2:] == ["assistant",
                                                                             "tool"]
        assert list(Rtc.objects.filter(turn=turn).order_by("offset")
                    .values_list("status", flat=True)) == ["completed", "pending"]


def test_a_save_that_cannot_drop_redis_copy_first_pauses_the_turn(
    make_user, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``checkpoint_invalidate`` (before an RTC's transaction) on a Redis that is away: the
    turn pauses before anything is written, loudly, and the copy it could not drop is the
    one PostgreSQL still agrees with."""
    import redis as redis_lib

    from apps.turns.models import TurnCheckpoint

    user = make_user()
    turn = Turn.objects.create(session=_session(user), user=user, status="running")
    tid = str(turn.id)
    state.checkpoint_save(tid, {"step": 1})
    away = redis_lib.Redis(host="127.0.0.1", port=9, socket_connect_timeout=0.2)
    monkeypatch.setattr(state, "get_redis", lambda: away)

    with pytest.raises(state.CheckpointNotCached):
        state.checkpoint_invalidate(tid)

    assert f"checkpoint of turn {tid}: Redis's copy could not be dropped" in caplog.text
    monkeypatch.undo()
    assert state.checkpoint_load(tid) == {"step": 1}
    assert TurnCheckpoint.objects.get(turn_id=tid).data == {"step": 1}


def test_a_resumed_turn_stopped_before_its_first_write_ends_there(make_user) -> None:
    """A resume moves the turn to running with its first write (``DjangoTurnPorts.begin``).
    Stopped between the worker reading it and that write, the run ends: the write is rolled
    back, the model is not asked, the turn stays cancelled and the session takes messages."""
    from apps.rtc.models import Rtc
    from apps.rtc.services import rtc_submit_result
    from apps.sessions.services import message_send
    from rtcagent.devtools.scripted_llm import ScriptedLLM

    user = make_user()
    with ScriptedLLM(api_key="k") as llm:
        worker, run_next = _in_process(llm)
        llm.enqueue({"tool_calls": [{"name": "read", "arguments": {"path": "/a.md"}}]})
        sent = message_send(user_id=user.id, device_id="d1", client_id="c-1",
                            content={"type": "text", "data": "read it"})
        run_next()
        turn = Turn.objects.get(session_id=sent.session.id)
        assert turn.status == "interrupted"
        rtc = Rtc.objects.get(turn=turn)
        rtc_submit_result(user_id=user.id, rtc_id=rtc.id, success=True, result="text",
                          client_id="r-1", device_id="d1")
        stale = Turn.objects.get(pk=turn.id)  # what the worker read before the stop
        turn_stop(user_id=user.id, session_id=sent.session.id)
        asked = len(llm.requests)
        messages = Message.objects.filter(session_id=sent.session.id).count()
        hold = queue.claim(lease_ms=30000)
        assert hold is not None and hold.take()["kind"] == "resume"
        worker._hold = hold
        worker.run_turn(stale)
        hold.ack()
        hold.yield_session()
        assert len(llm.requests) == asked
    assert Turn.objects.get(pk=turn.id).status == "cancelled"
    assert Message.objects.filter(session_id=sent.session.id).count() == messages
    assert state.checkpoint_load(str(turn.id)) is None
    assert not get_redis().exists(f"rtc:q:s:{{{sent.session.id}}}:parked")


@pytest.mark.parametrize("end", ["complete", "cancel", "fail"])
def test_an_ended_turn_is_never_seen_with_a_checkpoint(
    make_user, monkeypatch: pytest.MonkeyPatch, end: str
) -> None:
    """The checkpoint's row goes in the transaction that ends the turn: whoever sees the end
    (a client, the sweeper, a test) never finds the turn's checkpoint; Redis's copy goes
    right after. A turn that had ended otherwise loses both when its run notices."""
    from apps.turns.llm import OpenAIChat
    from apps.turns.llm_errors import LLMError
    from apps.turns.models import TurnCheckpoint
    from apps.turns.runner import DjangoTurnPorts

    user = make_user()
    turn = Turn.objects.create(session=_session(user), user=user, status="running")
    tid = str(turn.id)
    state.checkpoint_save(tid, Checkpoint().to_json())
    seen: list[tuple[str, bool]] = []
    uncache = state.checkpoint_uncache

    def watched(turn_id: str) -> None:  # right after the end's commit
        seen.append((Turn.objects.get(pk=turn_id).status,
                     TurnCheckpoint.objects.filter(turn_id=turn_id).exists()))
        uncache(turn_id)

    monkeypatch.setattr(state, "checkpoint_uncache", watched)
    ports = DjangoTurnPorts(turn, OpenAIChat(api_key="k", base_url="http://127.0.0.1:9/v1"))
    error = LLMError(category="api", title="Down", message="down", retryable=True)
    {"complete": lambda: ports.complete(Checkpoint()), "cancel": lambda: ports.cancel(Checkpoint()),
     "fail": lambda: ports.fail(error)}[end]()
    status = {"complete": "completed", "cancel": "cancelled", "fail": "failed"}[end]
    assert seen == [(status, False)]
    assert state.checkpoint_load(tid) is None  # neither copy left

    other = Turn.objects.create(session=_session(user), user=user, status="running")
    state.checkpoint_save(str(other.id), Checkpoint().to_json())
    late = DjangoTurnPorts(other, OpenAIChat(api_key="k", base_url="http://127.0.0.1:9/v1"))
    Turn.objects.filter(pk=other.id).update(status="cancelled")  # stopped by someone else
    late.complete(Checkpoint())
    assert Turn.objects.get(pk=other.id).status == "cancelled"
    assert state.checkpoint_load(str(other.id)) is None


def test_a_stopped_waiting_turn_loses_its_checkpoint_with_the_stop(
    make_user, monkeypatch: pytest.MonkeyPatch
) -> None:
    from apps.turns.models import TurnCheckpoint

    user = make_user()
    session = _session(user)
    turn = Turn.objects.create(session=session, user=user, status="interrupted")
    state.checkpoint_save(str(turn.id), Checkpoint().to_json())
    seen: list[tuple[str, bool]] = []
    uncache = state.checkpoint_uncache

    def watched(turn_id: str) -> None:  # after the stop's commit
        seen.append((Turn.objects.get(pk=turn_id).status,
                     TurnCheckpoint.objects.filter(turn_id=turn_id).exists()))
        uncache(turn_id)

    monkeypatch.setattr(state, "checkpoint_uncache", watched)
    assert turn_stop(user_id=user.id, session_id=session.id).status == "cancelled"
    assert seen == [("cancelled", False)]
    assert state.checkpoint_load(str(turn.id)) is None
