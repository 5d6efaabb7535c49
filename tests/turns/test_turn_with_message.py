"""A message's turn created with it (``message_send``), against the real database, Redis, queue
and scripted model: when nothing is ahead of the message in its session, its turn is created
``pending`` in the send's transaction and Update, and the worker that takes the message asks
the model at once; the turn moves to running with its first write.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from apps.gateway.models import TopicEvent
from apps.sessions import services as session_services
from apps.sessions.models import Message, Session
from apps.sessions.services import message_send
from apps.turns import queue, state
from apps.turns.models import Turn, TurnCheckpoint
from apps.turns.services import turn_stop, turn_transition
from apps.turns.worker import Worker
from rtcagent.devtools.scripted_llm import ScriptedLLM
from rtcagent.errors import RateLimited
from tests.turns.stack import in_process_worker, run_item

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def llm(model: ScriptedLLM) -> ScriptedLLM:
    return model


def _worker(llm: ScriptedLLM) -> Worker:
    return in_process_worker(llm)


def _run_next(worker: Worker) -> dict[str, Any]:
    """Run the next item to its end (or pause); the item."""
    return run_item(worker)[1]


def _send(user: Any, text: str, session: Session | None = None) -> Any:
    return message_send(user_id=user.id, device_id="d1", client_id=f"c-{time.monotonic_ns()}",
                        content={"type": "text", "data": text},
                        server_session_id=session.id if session is not None else None)


def _items(user: Any) -> list[list[tuple[str, str, str]]]:
    """Each Update of the user's topic: its items as (entity, action, status or "")."""
    out = []
    for row in TopicEvent.objects.filter(user_id=user.id, kind="update").order_by("offset"):
        out.append([(it["entity"], it["action"], str(data.get("status", "")))
                    for it, data in zip(row.data["items"], row.data["data_list"], strict=True)])
    return out


def test_a_message_with_nothing_ahead_gets_its_turn_in_the_send(make_user, llm) -> None:
    user = make_user()
    llm.enqueue({"content": "Hello."})
    sent = _send(user, "hi")

    turn = sent.turn
    assert turn is not None and turn.status == "pending"
    assert Message.objects.get(pk=sent.message.id).turn_id == turn.id
    assert Turn.objects.get(pk=turn.id).trigger_message_id == sent.message.id
    assert Session.objects.get(pk=sent.session.id).status == "active"
    # one Update: the session (active), the message and its turn
    ((first,),) = [sent.updates]
    assert [(i["entity"], i["action"]) for i in first["items"]] == [
        ("session", "created"), ("message", "created"), ("turn", "created")]
    assert first["data_list"][0]["status"] == "active"
    assert first["data_list"][2]["status"] == "pending"
    assert not TurnCheckpoint.objects.filter(turn_id=turn.id).exists()

    work = _run_next(_worker(llm))
    assert work == {"kind": "message", "message_id": str(sent.message.id),
                    "turn_id": str(turn.id)}
    turn.refresh_from_db()
    assert turn.status == "completed" and turn.started_at is not None
    assert len(llm.requests) == 1
    # the move to running rode on the first write's Update (the answer's first message, after
    # its first chunk went out): no commit of its own before the model was asked
    updates = _items(user)
    started = next(u for u in updates if ("turn", "updated", "running") in u)
    assert ("message", "created", "") in started
    assert [t for u in updates for t in u if t[0] == "turn"] == [
        ("turn", "created", "pending"), ("turn", "updated", "running"),
        ("turn", "updated", "completed")]
    rows = list(Message.objects.filter(turn=turn).order_by("global_offset")
                .values_list("content__type", "turn_offset"))
    assert rows == [("text", 0), ("markdown", 1)]
    assert Session.objects.get(pk=sent.session.id).status == "idle"


def test_a_message_behind_an_open_turn_waits_for_its_own(make_user, llm, settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "RESULT_WAIT": 0}  # the first turn pauses at once
    user = make_user()
    llm.enqueue({"content": "First.", "tool_calls": [
        {"name": "read", "arguments": {"path": "/a.md"}}]})
    llm.enqueue({"content": "Second."})
    llm.enqueue({"content": "Third."})
    first = _send(user, "one")
    worker = _worker(llm)
    _run_next(worker)  # the first turn waits on its RTC
    assert Turn.objects.get(pk=first.turn.id).status == "interrupted"

    second = _send(user, "two", first.session)
    assert second.turn is None
    assert Message.objects.get(pk=second.message.id).turn_id is None
    # a third one, while the second still waits for its turn: behind it, in order
    turn_stop(user_id=user.id, session_id=first.session.id)
    third = _send(user, "three", first.session)
    assert third.turn is None

    _run_next(worker)  # the second message: its turn created by the worker
    _run_next(worker)  # then the third
    turns = list(Turn.objects.filter(session=first.session).order_by("created_at")
                 .values_list("trigger_message__content__data", "status"))
    assert turns == [("one", "cancelled"), ("two", "completed"), ("three", "completed")]


def test_a_send_that_loses_the_race_for_the_turn_queues_instead(
        make_user, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two sends to one idle session: the one-open-turn constraint refuses the second turn;
    that send is made again without it (the message queues), not refused."""
    user = make_user()
    first = _send(user, "one")
    monkeypatch.setattr(session_services, "_turn_may_start", lambda session_id: True)
    second = _send(user, "two", first.session)
    assert second.turn is None
    assert Message.objects.filter(session=first.session).count() == 2
    assert Turn.objects.filter(session=first.session).count() == 1
    assert queue.pending(str(first.session.id))["msg"] == 2


def test_a_pending_turn_stopped_before_a_worker_takes_it_never_runs(make_user, llm) -> None:
    user = make_user()
    sent = _send(user, "hi")
    stopped = turn_stop(user_id=user.id, session_id=sent.session.id)
    assert stopped is not None and stopped.status == "cancelled"
    _run_next(_worker(llm))
    assert llm.requests == []
    assert Turn.objects.get(pk=sent.turn.id).status == "cancelled"
    assert Session.objects.get(pk=sent.session.id).status == "idle"


def test_a_tool_call_first_starts_the_turn_with_its_rtc(make_user, llm, settings) -> None:
    """An answer that is a tool call alone writes nothing before its RTC: the turn's move to
    running rides on the RTC's transaction and Update, whose checkpoint is its first."""
    settings.RTCAGENT = {**settings.RTCAGENT, "RESULT_WAIT": 0}  # it pauses at once
    user = make_user()
    llm.enqueue({"tool_calls": [{"name": "read", "arguments": {"path": "/a.md"}}]})
    sent = _send(user, "read it")
    _run_next(_worker(llm))
    pause = next(u for u in _items(user) if ("rtc", "created", "pending") in u)
    assert pause[0] == ("turn", "updated", "running")
    assert ("message", "created", "") in pause
    turn = Turn.objects.get(pk=sent.turn.id)
    assert turn.status == "interrupted"
    assert state.checkpoint_load(str(sent.turn.id))["waiting_rtc"]
    # the Update's turn is the row as the move left it (on PostgreSQL the move goes with the
    # commit, and the Update's copy is made in the worker): its first start stamped once
    row = next(r for r in TopicEvent.objects.filter(user_id=user.id, kind="update")
               if any(i["entity"] == "rtc" for i in r.data["items"]))
    moved = row.data["data_list"][0]
    assert moved["id"] == str(turn.id) and moved["status"] == "running"
    assert moved["started_at"] is not None
    assert datetime.fromisoformat(moved["started_at"].replace("Z", "+00:00")) == turn.started_at


class Killed(BaseException):
    """The worker process dies here (nothing on the way catches it)."""


def test_a_server_tool_first_starts_the_turn_with_its_checkpoint(make_user, llm,
                                                                  monkeypatch) -> None:
    """A first answer that is a server tool's call alone is stored before the tool runs: that
    save is the run's first write, so the turn moves to running with it (a pending turn never
    has a checkpoint, and its run reads none). A worker that dies after it leaves a running
    turn that the next run continues from there: the model is not asked that answer again."""
    from apps.turns import accounting, server_tools

    # the second answer's token figures would be published after the test, by the daemon thread
    monkeypatch.setattr(accounting, "PUBLISHER", accounting.SessionPublisher(autostart=False))
    user = make_user()
    llm.enqueue({"tool_calls": [{"name": "listLoop", "arguments": {}}]})
    llm.enqueue({"content": "No loops."})
    sent = _send(user, "any loops?")
    worker = _worker(llm)
    hold = queue.claim(lease_ms=30000)
    assert hold is not None
    work = hold.take()
    worker._hold = hold

    def dies(*args: Any, **kwargs: Any) -> str:
        raise Killed

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(server_tools, "run", dies)
        with pytest.raises(Killed):
            worker.handle(hold.session_id, work)
    worker._hold = None
    turn = Turn.objects.get(pk=sent.turn.id)
    assert turn.status == "running"
    assert TurnCheckpoint.objects.get(turn_id=turn.id).data["step"] == 1
    assert [t for u in _items(user) for t in u if t[0] == "turn"] == [
        ("turn", "created", "pending"), ("turn", "updated", "running")]

    hold.yield_session()  # as the sweep does for a dead holder: the item back in its list
    _run_next(worker)
    turn.refresh_from_db()
    assert turn.status == "completed" and len(llm.requests) == 2
    assert list(Message.objects.filter(turn=turn).order_by("turn_offset")
                .values_list("content__type", flat=True)) == [
        "text", "toolcall_input", "toolcall_output", "markdown"]


def test_a_pending_turn_stopped_while_its_model_answers_ends_there(make_user, llm) -> None:
    """Stopped (cancelled at once: it is pending) after the worker asked the model: the
    answer's first write finds the turn ended, and nothing of the answer is kept."""
    from apps.turns.runner import DjangoTurnPorts

    user = make_user()
    llm.enqueue({"content": "A long answer nobody will read."})
    sent = _send(user, "hi")
    original = DjangoTurnPorts.prompt

    def stopped_meanwhile(self: DjangoTurnPorts, cp: Any, tools: Any) -> Any:
        messages = original(self, cp, tools)
        turn_stop(user_id=user.id, session_id=sent.session.id)  # cancels the pending turn
        return messages

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(DjangoTurnPorts, "prompt", stopped_meanwhile)
        _run_next(_worker(llm))
    turn = Turn.objects.get(pk=sent.turn.id)
    assert turn.status == "cancelled"
    assert list(Message.objects.filter(turn=turn).values_list("content__type", flat=True)) == [
        "text"]
    assert Session.objects.get(pk=sent.session.id).status == "idle"
    assert not TurnCheckpoint.objects.filter(turn_id=turn.id).exists()


def test_a_tool_call_whose_turn_stops_before_its_transaction_leaves_no_hole(
        make_user, llm) -> None:
    """The pause reserves its Update's topic offset before its transaction (with the
    checkpoint's drop, one Redis round trip); here the turn is stopped right then, the
    transaction finds it ended and rolls back, and the offset is given back at once (a gap),
    not after ``GAP_GRACE``: the user's watermark is not held behind it, and nothing of the
    call is kept."""
    from apps.gateway import stream
    from apps.rtc.models import Rtc

    user = make_user()
    llm.enqueue({"tool_calls": [{"id": "call_0", "name": "read",
                                 "arguments": {"path": "/a.txt"}}]})
    sent = _send(user, "hi")
    original = state.invalidate_reserving
    reserved = []

    def stopped_meanwhile(turn_id: str, user_id: int, **kwargs: Any) -> Any:
        found = original(turn_id, user_id, **kwargs)
        reserved.append(found)
        turn_stop(user_id=user.id, session_id=sent.session.id)  # cancels the pending turn
        return found

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(state, "invalidate_reserving", stopped_meanwhile)
        _run_next(_worker(llm))
    turn = Turn.objects.get(pk=sent.turn.id)
    assert turn.status == "cancelled"
    assert not Rtc.objects.filter(turn_id=turn.id).exists()
    assert list(Message.objects.filter(turn=turn).values_list("content__type", flat=True)) == [
        "text"]
    (reservation,) = reserved
    position = reservation.position()
    pos = stream.position(user.id)
    assert pos.watermark == pos.offset  # nothing pending: the reserved offset was given back
    kinds = dict(TopicEvent.objects.filter(user_id=user.id).values_list("offset", "kind"))
    assert sorted(kinds) == list(range(1, pos.offset + 1))  # no hole
    assert kinds[position.offset] == "gap"


def test_a_turn_taken_but_not_started_is_run_again_from_nothing(make_user, llm) -> None:
    """A worker that took the pending turn died before its first write: the turn is still
    pending, with no checkpoint; the item comes back and the turn runs once."""
    user = make_user()
    llm.enqueue({"content": "Hello."})
    sent = _send(user, "hi")
    hold = queue.claim(lease_ms=30000)
    assert hold is not None and hold.take() is not None
    hold.yield_session()  # as the sweep does for a dead holder: the item back in its list
    assert queue.pending(str(sent.session.id))["msg"] == 1
    assert state.checkpoint_load(str(sent.turn.id)) is None

    _run_next(_worker(llm))
    turn = Turn.objects.get(pk=sent.turn.id)
    assert turn.status == "completed" and len(llm.requests) == 1


def test_the_sweeper_leaves_a_queued_pending_turn_to_its_message(make_user, llm) -> None:
    """A pending turn waiting in the queue longer than ``ORPHAN_AFTER`` (workers busy) is not
    queued a second time; one whose item was lost is."""
    user = make_user()
    sent = _send(user, "hi")
    sid = str(sent.session.id)
    Turn.objects.filter(pk=sent.turn.id).update(updated_at=timezone.now() - timedelta(minutes=5))
    worker = _worker(llm)
    worker.resume_orphans()
    assert queue.pending(sid) == {"resume": 0, "msg": 1, "inflight": 0}
    hold = queue.claim(lease_ms=30000)
    assert hold is not None and hold.take() is not None
    hold.ack()
    hold.yield_session()  # the item is gone, the turn still pending
    worker.resume_orphans()
    assert queue.pending(sid)["resume"] == 1


def test_pending_turns_count_as_queued_for_the_cap(make_user, settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "MAX_QUEUED_TURNS_PER_USER": 2}
    user = make_user()
    a = _send(user, "a")
    b = _send(user, "b")
    assert a.turn is not None and b.turn is not None
    with pytest.raises(RateLimited):
        _send(user, "c")
    turn_transition(turn_id=a.turn.id, to="running")  # a worker started it: a slot frees
    assert _send(user, "c").turn is not None


def test_the_turns_first_reads_go_together(make_user, llm) -> None:
    """The worker reads the turn with its session, its message and the model's price row in
    one statement, and the prompt's summary, reminders, memories and the search of the user's
    memories for the message in one more (PostgreSQL: one query string each; elsewhere one by
    one): two round trips before the model request. The answer is the same."""
    from django.db import connection

    from apps.ops.models import ModelPrice

    user = make_user()
    llm.enqueue({"content": "Hello."})
    sent = _send(user, "hi")
    statements: list[str] = []

    before: list[str] = []  # the statements before the model request

    def record(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        statements.append(sql)
        if not llm.requests:
            before.append(sql)
        return execute(sql, params, many, context)

    worker = _worker(llm)
    with connection.execute_wrapper(record):
        _run_next(worker)
    assert Turn.objects.get(pk=sent.turn.id).status == "completed"
    price, turn = ModelPrice._meta.db_table, Turn._meta.db_table
    if connection.vendor != "postgresql":
        return
    first = statements[0]
    assert f"FROM {turn} t" in first and f"FROM {price} p" in first and "; " in first
    assert f"LEFT JOIN {Message._meta.db_table} tm" in first  # the turn's message with it
    prompt = next(s for s in statements if "tasks_goal" in s)
    assert "memory_sessionmemory" in prompt and "memory_usermemory" in prompt
    assert "to_tsquery" in prompt  # the recalled memories' search
    assert before == [first, prompt]
    # a short session's conversation is read in the same round trip: no statement of its own
    message = Message._meta.db_table
    conversation = [s for s in statements if f"FROM {message} m LEFT JOIN" in s]
    assert conversation == [prompt]
    # the model had the whole conversation
    assert llm.requests[0].body["messages"][-1]["content"] == "hi"


def test_a_new_turns_start_waits_on_redis_once(make_user, llm, monkeypatch) -> None:
    """From the worker's claim to the model request, one Redis round trip: the claim takes
    the item in the same script, and the stop flag's first poll waits its interval (a stop of
    the pending turn cancels its row, which the first write finds)."""
    import redis as redis_lib

    user = make_user()
    worker = _worker(llm)
    llm.enqueue({"content": "Hello."})
    _send(user, "warm up")  # the process's first turn loads the tokenizer (over the interval)
    run_item(worker, take=True)
    llm.enqueue({"content": "Hello."})
    sent = _send(user, "hi")
    seen = len(llm.requests)
    waited: list[str] = []
    command, execute = redis_lib.Redis.execute_command, redis_lib.client.Pipeline.execute

    def one(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if len(llm.requests) == seen:  # before the model has the request
            waited.append(str(args[0]))
        return command(self, *args, **kwargs)

    def batch(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if len(llm.requests) == seen:
            waited.append("pipeline")
        return execute(self, *args, **kwargs)

    monkeypatch.setattr(redis_lib.Redis, "execute_command", one)
    monkeypatch.setattr(redis_lib.client.Pipeline, "execute", batch)
    _, work = run_item(worker, take=True)
    monkeypatch.undo()
    assert work["turn_id"] == str(sent.turn.id)
    assert waited == ["EVAL"]
    assert Turn.objects.get(pk=sent.turn.id).status == "completed"


def test_a_pending_turn_stopped_as_its_worker_starts_writes_nothing(make_user, llm) -> None:
    """The first stop poll waits its interval: a stop that lands between the worker's read of
    the pending turn and the model's answer still ends it with nothing of the answer written."""
    user = make_user()
    llm.enqueue({"content": "Hello."})
    sent = _send(user, "hi")
    from apps.turns.runner import DjangoTurnPorts

    original = DjangoTurnPorts.begin

    def stopped_after_begin(self):  # type: ignore[no-untyped-def]
        began = original(self)
        turn_stop(user_id=user.id, session_id=sent.session.id)  # cancels the pending turn
        return began

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(DjangoTurnPorts, "begin", stopped_after_begin)
        run_item(_worker(llm), take=True)
    assert Turn.objects.get(pk=sent.turn.id).status == "cancelled"
    assert list(Message.objects.filter(session_id=sent.session.id)
                .values_list("role", flat=True)) == ["user"]


def test_the_prompt_state_is_stored_once_the_request_is_out(make_user, llm, monkeypatch) -> None:
    """The prompt's state for the session's next run (microcompact boundary, the last
    request's parts) is written to Redis after the request has left, not on its way; a
    request that never went out (the model refused the connection) still has it written
    when the run ends."""
    from apps.turns import context
    from rtcagent import keys
    from rtcagent.redis import get_redis

    user = make_user()
    written: list[int] = []
    write = context._write_state

    def counted(session_id: object, **fields: Any) -> None:
        written.append(len(llm.requests))
        write(session_id, **fields)

    monkeypatch.setattr(context, "_write_state", counted)
    llm.enqueue({"content": "Hello."})
    sent = _send(user, "hi")
    _run_next(_worker(llm))
    assert Turn.objects.get(pk=sent.turn.id).status == "completed"
    assert written == [1]  # the one request was out when its state was written
    state = get_redis().hgetall(keys.context_state(sent.session.id))
    assert state.get("prev") and state.get("last_call")

    get_redis().delete(keys.context_state(sent.session.id))
    written.clear()
    llm.enqueue({"error": {"status": 400, "message": "bad request"}})
    again = _send(user, "once more", sent.session)
    _run_next(_worker(llm))
    assert Turn.objects.get(pk=again.turn.id).status == "failed"
    assert len(written) == 1  # at the run's end
    assert get_redis().hgetall(keys.context_state(sent.session.id)).get("prev")
