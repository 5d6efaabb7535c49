"""A browser tool's quick result continues its turn in place (``RTC_RESULT_WAIT``,
``DjangoTurnPorts.await_result``), against the real database, Redis, queue and scripted model.

The worker that created the RTC keeps the turn (running, its session held) for up to
``RESULT_WAIT`` seconds; a result in that time goes on in the same run, without the turn
becoming interrupted and without a second claim; a slower one finds the turn interrupted, as
before. A stop, the worker's shutdown or a call a person must approve end the wait at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from apps.gateway.models import TopicEvent
from apps.rtc.models import Rtc
from apps.rtc.services import rtc_submit_result
from apps.sessions.models import Message, Session
from apps.sessions.services import message_send
from apps.turns import queue
from apps.turns.models import LLMCall, Turn
from apps.turns.services import turn_stop
from apps.turns.worker import Worker
from rtcagent.devtools.scripted_llm import ScriptedLLM
from rtcagent.redis import get_redis
from tests.turns.stack import in_process_worker, run_item

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def wait_for(settings: Any) -> Callable[[float], None]:
    def set_wait(seconds: float) -> None:
        settings.RTCAGENT = {**settings.RTCAGENT, "RESULT_WAIT": seconds}
    return set_wait


@pytest.fixture
def llm(model: ScriptedLLM) -> ScriptedLLM:
    return model


def _worker(llm: ScriptedLLM) -> Worker:
    return in_process_worker(llm)


def _claim_and_run(worker: Worker) -> queue.Hold:
    return run_item(worker, keep=True)[0]


def _send(user: Any) -> Session:
    sent = message_send(user_id=user.id, device_id="d1", client_id=f"c-{time.monotonic_ns()}",
                        content={"type": "text", "data": "read it"})
    return sent.session


def _in_thread(fn: Callable[[], None]) -> threading.Thread:
    errors: list[BaseException] = []

    def run() -> None:
        from django.db import connection

        try:
            fn()
        except BaseException as exc:  # re-raised by the test's join
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.errors = errors  # type: ignore[attr-defined]
    thread.start()
    return thread


def _join(thread: threading.Thread) -> None:
    thread.join(10)
    assert not thread.is_alive()
    for exc in thread.errors:  # type: ignore[attr-defined]
        raise exc


def _rtc_of(session: Session, *, early: bool = False) -> Rtc:
    """The session's RTC once created; with ``early``, once the worker also expects its
    result early (``Hold.expect_result``: a result that comes sooner goes the usual way)."""
    deadline = time.monotonic() + 10
    while (rtc := Rtc.objects.filter(session_id=session.id).first()) is None:
        assert time.monotonic() < deadline, "no RTC was created"
        time.sleep(0.01)
    while early and not get_redis().exists(queue.early_key(rtc.id)):
        assert time.monotonic() < deadline, "the worker never waited for the result"
        time.sleep(0.01)
    return rtc


def _browser(user: Any, session: Session, *, delay: float = 0.0,
             early: bool = False) -> threading.Thread:
    """The browser: waits for the session's RTC (``_rtc_of``), then (after ``delay``) submits
    its result."""
    def answer() -> None:
        rtc = _rtc_of(session, early=early)
        time.sleep(delay)
        rtc_submit_result(user_id=user.id, rtc_id=rtc.id, success=True, result="the notes",
                          client_id="tab-1", device_id="d1")
    return _in_thread(answer)


def _turn_statuses(turn: Turn) -> list[str]:
    """The statuses the turn was published with, in order."""
    out = []
    for row in TopicEvent.objects.filter(user_id=turn.user_id, kind="update").order_by("offset"):
        for it, data in zip(row.data["items"], row.data["data_list"], strict=True):
            if it["entity"] == "turn" and it["entity_id"] == str(turn.id):
                out.append(data["status"])
    return out


def _update_of(msg: Message) -> list[tuple[str, str]]:
    """The items of the Update that published ``msg``'s creation."""
    for row in TopicEvent.objects.filter(user_id=msg.user_id, kind="update").order_by("offset"):
        items = [(it["entity"], it["action"]) for it in row.data["items"]]
        if any(it["entity_id"] == str(msg.id) and it["action"] == "created"
               for it in row.data["items"]):
            return items
    raise AssertionError(f"message {msg.id} was never published")


def _result_came_with_its_message(turn: Turn) -> None:
    """The result's ``toolcall_output`` message was written by the submit, in its transaction
    and Update, linked to the RTC: the worker wrote none of its own."""
    (out,) = Message.objects.filter(turn=turn, content__type="toolcall_output")
    rtc = Rtc.objects.get(turn=turn)
    assert rtc.output_message_id == out.id and out.parent_message_id == rtc.message_id
    assert out.content["data"]["output"] == "the notes"
    assert out.content["data"]["status"] == "completed"
    assert _update_of(out) == [("message", "created"), ("rtc", "updated")]


def _script(llm: ScriptedLLM, tool: str = "read") -> None:
    llm.enqueue({"content": "Reading.", "tool_calls": [
        {"name": tool, "arguments": {"path": "/a.md"} if tool == "read" else {"code": "1"}}]})
    llm.enqueue({"content": "Done."})


def test_a_quick_result_continues_the_turn_in_place(make_user, llm, wait_for) -> None:
    wait_for(5.0)
    user = make_user()
    _script(llm)
    session = _send(user)
    browser = _browser(user, session)
    started = time.monotonic()
    hold = _claim_and_run(_worker(llm))
    _join(browser)

    turn = Turn.objects.get(session_id=session.id)
    assert turn.status == "completed"
    assert time.monotonic() - started < 5.0  # it did not wait the whole time
    # one run, one claim: the result's resume item was dropped, nothing is left to take
    assert hold.taken == 1
    assert queue.pending(str(session.id)) == {"resume": 0, "msg": 0, "inflight": 0}
    assert hold.take() is None
    # the turn went on without pausing: never published as interrupted
    assert "interrupted" not in _turn_statuses(turn)
    assert _turn_statuses(turn)[-1] == "completed"
    # the model had the result after its call, and the messages are in order
    assert len(llm.requests) == 2
    last = llm.requests[1].body["messages"]
    assert [m["role"] for m in last[-2:]] == ["assistant", "tool"]
    assert "the notes" in last[-1]["content"]
    rows = list(Message.objects.filter(turn=turn).order_by("global_offset")
                .values_list("content__type", "turn_offset"))
    assert rows == [("text", 0), ("markdown", 1), ("toolcall_input", 2),
                    ("toolcall_output", 3), ("markdown", 4)]
    _result_came_with_its_message(turn)
    # each answer accounted once (the first once the second request was out)
    assert list(LLMCall.objects.filter(turn=turn).order_by("step")
                .values_list("step", flat=True)) == [0, 1]


def _rtc_reads(queries: list[dict[str, Any]]) -> int:
    """How many of ``queries`` read one RTC by its id (``DjangoTurnPorts.rtc_outcome``)."""
    return sum(1 for q in queries if (q["sql"] or "").startswith("SELECT")
               and "WHERE r.id = " in q["sql"])


def test_the_wake_up_carries_the_outcome_and_the_queue_is_tidied_after_the_request(
        make_user, llm, wait_for, monkeypatch) -> None:
    """The submit's wake-up carries the RTC's outcome as committed: the waiting worker goes
    on without reading the RTC back, and drops the result's resume item once the next
    request is out (not before it: nothing but the prompt's reads between result and
    model)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    wait_for(5.0)
    user = make_user()
    _script(llm)
    session = _send(user)
    requests_at_drop: list[int] = []
    drop = queue.Hold.drop_resumes

    def counted_drop(hold: queue.Hold, turn_id: object) -> int:
        requests_at_drop.append(len(llm.requests))
        return drop(hold, turn_id)

    monkeypatch.setattr(queue.Hold, "drop_resumes", counted_drop)
    browser = _browser(user, session)
    with CaptureQueriesContext(connection) as ctx:
        hold = _claim_and_run(_worker(llm))
    _join(browser)

    turn = Turn.objects.get(session_id=session.id)
    assert turn.status == "completed" and "interrupted" not in _turn_statuses(turn)
    assert _rtc_reads(ctx.captured_queries) == 0
    assert "the notes" in llm.requests[1].body["messages"][-1]["content"]
    _result_came_with_its_message(turn)
    # the result's resume item was removed once, after the second request had left
    assert requests_at_drop == [2]
    assert queue.pending(str(session.id)) == {"resume": 0, "msg": 0, "inflight": 0}
    assert hold.take() is None


def test_a_long_result_is_read_from_the_database_not_the_wake_up(
        make_user, llm, wait_for) -> None:
    """A result too long to pass through Redis again (``queue.WAKE_TEXT_MAX``) leaves the
    wake-up bare: the worker reads it, and the model gets every character."""
    wait_for(5.0)
    user = make_user()
    _script(llm)
    session = _send(user)
    long = "x" * (queue.WAKE_TEXT_MAX + 10)

    def answer() -> None:
        rtc = _rtc_of(session)
        rtc_submit_result(user_id=user.id, rtc_id=rtc.id, success=True, result=long,
                          client_id="tab-1", device_id="d1")

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    browser = _in_thread(answer)
    with CaptureQueriesContext(connection) as ctx:
        _claim_and_run(_worker(llm))
    _join(browser)
    turn = Turn.objects.get(session_id=session.id)
    assert turn.status == "completed" and "interrupted" not in _turn_statuses(turn)
    assert _rtc_reads(ctx.captured_queries) >= 1
    assert llm.requests[1].body["messages"][-1]["content"] == long


def test_a_wake_up_naming_another_rtc_is_not_taken_for_this_one(make_user, llm) -> None:
    """A wake-up's outcome is used only for the RTC it names, and only a finished one; any
    other wake-up (a bare "1", another RTC's, one unreadable) means: read the RTC."""
    import json

    from apps.turns.llm import OpenAIChat
    from apps.turns.runner import DjangoTurnPorts

    user = make_user()
    session = _send(user)
    turn = Turn.objects.get(session_id=session.id)
    ports = DjangoTurnPorts(turn, OpenAIChat(api_key="k", base_url=llm.base_url))
    call_msg = Message(session_id=session.id, user_id=user.id, turn_id=turn.id, global_offset=3,
                       turn_offset=2, client_id=f"turn:{turn.id}:1:call:call_0",
                       content={"type": "toolcall_input", "data": {"input": "{}"}})
    ports._rtc_calls["r-1"] = (Rtc(user_id=user.id, turn_id=turn.id, tool_call_id="call_0",
                                   tool_name="read"), call_msg)  # as ``create_rtc`` keeps it
    mine = {"rtc": "r-1", "status": "completed", "text": "ok", "written": True}
    for woken in (None, "1", "{not json", json.dumps({**mine, "rtc": "r-2"}),
                  json.dumps({**mine, "status": "pending"}),
                  json.dumps({**mine, "written": False})):  # its message to be read, recorded
        assert ports._woken_outcome("r-1", woken) is None
    outcome = ports._woken_outcome("r-1", json.dumps(mine))
    assert outcome is not None and (outcome.finished, outcome.text, outcome.status) == (
        True, "ok", "completed")
    assert ports._result_written == "call_0"  # its message came with the result
    (pending,) = ports.context.pending  # the next prompt has it, even from rows read before
    assert pending.parent_message is call_msg and pending.content["data"]["output"] == "ok"
    ports.close()


def test_a_slow_tools_answer_is_accounted_while_the_worker_waits(
        make_user, llm, wait_for) -> None:
    """The wait's first quiet quarter second is used for the answer's bookkeeping: the browser
    here answers only once the first answer is accounted, and the turn still goes on in
    place."""
    wait_for(5.0)
    user = make_user()
    _script(llm)
    session = _send(user)

    def answer_once_accounted() -> None:
        deadline = time.monotonic() + 5
        while not LLMCall.objects.filter(session_id=session.id).exists():
            assert time.monotonic() < deadline, "the answer was not accounted while waiting"
            time.sleep(0.02)
        rtc = Rtc.objects.get(session_id=session.id)
        assert rtc.status == "pending"
        rtc_submit_result(user_id=user.id, rtc_id=rtc.id, success=True, result="the notes",
                          client_id="tab-1", device_id="d1")

    browser = _in_thread(answer_once_accounted)
    hold = _claim_and_run(_worker(llm))
    _join(browser)
    turn = Turn.objects.get(session_id=session.id)
    assert turn.status == "completed" and hold.taken == 1
    assert "interrupted" not in _turn_statuses(turn)
    assert LLMCall.objects.filter(turn=turn).count() == 2


def test_a_result_slower_than_the_wait_finds_the_turn_interrupted(
        make_user, llm, wait_for) -> None:
    wait_for(0.3)
    user = make_user()
    _script(llm)
    session = _send(user)
    started = time.monotonic()
    hold = _claim_and_run(_worker(llm))
    waited = time.monotonic() - started

    turn = Turn.objects.get(session_id=session.id)
    assert turn.status == "interrupted"
    assert waited >= 0.3
    assert hold.take() is None  # nothing to do: the session is let go
    rtc = Rtc.objects.get(turn=turn)
    rtc_submit_result(user_id=user.id, rtc_id=rtc.id, success=True, result="the notes",
                      client_id="tab-1", device_id="d1")
    _claim_and_run(_worker(llm))
    turn.refresh_from_db()
    assert turn.status == "completed"
    assert _turn_statuses(turn)[-3:] == ["interrupted", "running", "completed"]
    assert "the notes" in llm.requests[1].body["messages"][-1]["content"]
    _result_came_with_its_message(turn)
    assert list(Message.objects.filter(turn=turn).order_by("global_offset")
                .values_list("turn_offset", flat=True)) == [0, 1, 2, 3, 4]


def test_each_result_of_an_answer_comes_with_its_message(make_user, llm, wait_for) -> None:
    """Two browser calls in one answer, the first rejected and the second answered, each
    while the turn waits (interrupted): each result's message is written with it, in its
    place in the turn, and the model is told both."""
    from apps.rtc.services import rtc_update_status

    wait_for(0)
    user = make_user()
    llm.enqueue({"tool_calls": [{"name": "read", "arguments": {"path": "/a.md"}},
                                {"name": "read", "arguments": {"path": "/b.md"}}]})
    llm.enqueue({"content": "Done."})
    session = _send(user)
    worker = _worker(llm)
    run_item(worker)
    first = Rtc.objects.get(session_id=session.id)
    rtc_update_status(user_id=user.id, rtc_id=first.id, status="rejected", reason="not now",
                      client_id="tab-1", device_id="d1")
    run_item(worker)
    second = Rtc.objects.exclude(pk=first.id).get(session_id=session.id)
    rtc_submit_result(user_id=user.id, rtc_id=second.id, success=True, result="the notes",
                      client_id="tab-1", device_id="d1")
    run_item(worker)

    turn = Turn.objects.get(session_id=session.id)
    assert turn.status == "completed" and len(llm.requests) == 2
    rows = list(Message.objects.filter(turn=turn).order_by("global_offset")
                .values_list("content__type", "turn_offset", "content__data__output"))
    assert rows == [("text", 0, None), ("toolcall_input", 1, None),
                    ("toolcall_output", 2, "[Tool Rejected] not now"), ("toolcall_input", 3, None),
                    ("toolcall_output", 4, "the notes"), ("markdown", 5, None)]
    for rtc in (first, second):
        rtc.refresh_from_db()
        out = Message.objects.get(pk=rtc.output_message_id)
        assert out.parent_message_id == rtc.message_id
        assert _update_of(out) == [("message", "created"), ("rtc", "updated")]
    told = [m["content"] for m in llm.requests[1].body["messages"] if m["role"] == "tool"]
    assert told == ["[Tool Rejected] not now", "the notes"]


def test_a_stop_ends_the_wait_and_cancels_the_turn(make_user, llm, wait_for) -> None:
    wait_for(5.0)
    user = make_user()
    _script(llm)
    session = _send(user)

    def stop() -> None:
        while not Rtc.objects.filter(session_id=session.id).exists():
            time.sleep(0.01)
        turn_stop(user_id=user.id, session_id=session.id)

    stopper = _in_thread(stop)
    started = time.monotonic()
    _claim_and_run(_worker(llm))
    _join(stopper)

    assert time.monotonic() - started < 3.0
    turn = Turn.objects.get(session_id=session.id)
    assert turn.status == "cancelled"
    rtc = Rtc.objects.get(turn=turn)
    assert rtc.status == "failed" and rtc.error_message == "the turn was stopped"
    assert len(llm.requests) == 1  # the model was not asked again


def test_a_worker_shutting_down_lets_the_turn_go_at_once(make_user, llm, wait_for) -> None:
    wait_for(5.0)
    user = make_user()
    _script(llm)
    session = _send(user)
    worker = _worker(llm)

    def shut_down() -> None:
        while not Rtc.objects.filter(session_id=session.id).exists():
            time.sleep(0.01)
        worker.stopping.set()

    stopper = _in_thread(shut_down)
    started = time.monotonic()
    _claim_and_run(worker)
    _join(stopper)

    assert time.monotonic() - started < 3.0
    turn = Turn.objects.get(session_id=session.id)
    assert turn.status == "interrupted"  # another worker resumes it when the result comes


def test_a_call_a_person_must_approve_is_not_waited_for(make_user, llm, wait_for) -> None:
    wait_for(5.0)
    user = make_user()
    _script(llm, tool="script")  # runs code: approved first in the default work mode
    session = _send(user)
    started = time.monotonic()
    _claim_and_run(_worker(llm))

    assert time.monotonic() - started < 3.0
    rtc = Rtc.objects.get(session_id=session.id)
    assert rtc.needs_approval
    assert Turn.objects.get(session_id=session.id).status == "interrupted"


def test_a_resume_wakes_only_a_holder(make_user) -> None:
    """``enqueue`` pushes the wake-up only while the session is held (only a holder waits), and
    ``drop_resumes`` needs the hold."""
    user = make_user()
    sid = str(Session.objects.create(user=user).id)
    wake = queue._k(sid, "wake")
    queue.enqueue_resume(sid, "t-1", user_id=user.id)
    assert not get_redis().exists(wake)

    hold = queue.claim(lease_ms=30000)
    assert hold is not None and hold.session_id == sid
    assert not hold.wait_for_wake(0.05)
    queue.enqueue_resume(sid, "t-1", user_id=user.id)
    queue.enqueue_resume(sid, "t-2", user_id=user.id)
    assert hold.wait_for_wake(1.0)
    assert hold.drop_resumes("t-1") == 2  # both of t-1's items, not t-2's
    assert queue.pending(sid)["resume"] == 1

    other = queue.Hold(sid, "not-the-token", 30000)
    assert other.drop_resumes("t-2") == 0
    assert queue.pending(sid)["resume"] == 1
    assert hold.take() == {"kind": "resume", "turn_id": "t-2"}


# --- early results: the next request leaves before the submit commits -------------------------


def _held_submit(monkeypatch: Any, *, fail: bool = False) -> tuple[threading.Event,
                                                                    threading.Event]:
    """Make the submit's transaction stop where it writes the result's message (after the
    early offer, before the commit) until the returned ``release`` is set; ``reached`` is set
    when it gets there. With ``fail``, the write then raises (the submit fails, once)."""
    from apps.turns import runner

    reached, release = threading.Event(), threading.Event()
    write = runner.write_result_message
    calls: list[int] = []

    def held(*args: Any, **kwargs: Any) -> Message:
        calls.append(1)
        if len(calls) == 1:
            reached.set()
            assert release.wait(10), "the test never released the submit"
            if fail:
                raise RuntimeError("the database went away")
        return write(*args, **kwargs)

    monkeypatch.setattr(runner, "write_result_message", held)
    return reached, release


def test_an_early_result_reaches_the_model_before_its_commit_and_shows_after_it(
        make_user, llm, wait_for, monkeypatch) -> None:
    """The submit offers the result to the waiting worker before its transaction: the model
    is asked while the submit has not committed, and nothing of the answer is stored or
    published before the commit confirms the result."""
    wait_for(5.0)
    user = make_user()
    _script(llm)
    session = _send(user)
    reached, release = _held_submit(monkeypatch)
    browser = _browser(user, session, early=True)
    seen: dict[str, Any] = {}

    def watch() -> None:
        assert reached.wait(10), "the submit never reached its write"
        llm.wait_for_requests(2, timeout=10)  # asked with the result still uncommitted
        time.sleep(0.2)  # the answer (two chunks) has long arrived: none of it may show
        seen["rtc"] = Rtc.objects.get(session_id=session.id).status
        seen["messages"] = Message.objects.filter(session_id=session.id).count()
        seen["events"] = TopicEvent.objects.filter(user_id=user.id).count()
        release.set()

    watcher = _in_thread(watch)
    hold = _claim_and_run(_worker(llm))
    _join(browser)
    _join(watcher)

    assert seen["rtc"] == "pending"  # the request left before the result was stored
    turn = Turn.objects.get(session_id=session.id)
    assert turn.status == "completed" and hold.taken == 1
    assert "interrupted" not in _turn_statuses(turn)
    assert len(llm.requests) == 2
    assert "the notes" in llm.requests[1].body["messages"][-1]["content"]
    # while it was unconfirmed, the answer wrote and published nothing
    rows = list(Message.objects.filter(turn=turn).order_by("global_offset")
                .values_list("content__type", "turn_offset"))
    assert rows == [("text", 0), ("markdown", 1), ("toolcall_input", 2),
                    ("toolcall_output", 3), ("markdown", 4)]
    # the trigger, the first answer and its call: the result's row (the submit's) was not
    # committed yet, and the second answer, streamed by then, was not written
    assert seen["messages"] == 3
    assert seen["events"] < TopicEvent.objects.filter(user_id=user.id).count()
    _result_came_with_its_message(turn)
    assert queue.pending(str(session.id)) == {"resume": 0, "msg": 0, "inflight": 0}


def test_an_early_result_whose_submit_fails_is_dropped_and_the_turn_waits(
        make_user, llm, wait_for, monkeypatch) -> None:
    """The submit that offered the result fails before its commit: the worker drops the
    request it made with it (nothing of that answer is stored), the turn waits for its RTC
    (still pending), and the browser's retry resumes it with the result."""
    wait_for(5.0)
    user = make_user()
    llm.enqueue({"content": "Reading.", "tool_calls": [
        {"name": "read", "arguments": {"path": "/a.md"}}]})
    llm.enqueue({"content": "Never shown."})
    llm.enqueue({"content": "Done."})
    session = _send(user)
    reached, release = _held_submit(monkeypatch, fail=True)
    failed: list[BaseException] = []

    def answer() -> None:
        rtc = _rtc_of(session, early=True)
        try:
            rtc_submit_result(user_id=user.id, rtc_id=rtc.id, success=True,
                              result={"b": 1, "a": [2]}, client_id="tab-1", device_id="d1")
        except RuntimeError as exc:
            failed.append(exc)

    def release_once_asked() -> None:
        assert reached.wait(10)
        llm.wait_for_requests(2, timeout=10)
        release.set()

    browser, releaser = _in_thread(answer), _in_thread(release_once_asked)
    hold = _claim_and_run(_worker(llm))
    _join(browser)
    _join(releaser)
    assert hold.take() is None  # nothing queued by the failed submit: the session is let go

    assert failed, "the submit should have failed"
    turn = Turn.objects.get(session_id=session.id)
    assert turn.status == "interrupted"
    rtc = Rtc.objects.get(turn=turn)
    assert rtc.status == "pending"
    assert not Message.objects.filter(turn=turn, content__data="Never shown.").exists()
    assert not Message.objects.filter(turn=turn, content__type="toolcall_output").exists()

    # the browser retries: the turn resumes and the model is told the result
    rtc_submit_result(user_id=user.id, rtc_id=rtc.id, success=True, result={"b": 1, "a": [2]},
                      client_id="tab-1", device_id="d1")
    _claim_and_run(_worker(llm))
    turn.refresh_from_db()
    assert turn.status == "completed"
    assert len(llm.requests) == 3
    told = llm.requests[2].body["messages"][-1]["content"]
    assert told == '{"b": 1, "a": [2]}'  # as the browser sent it, key order kept
    texts = list(Message.objects.filter(turn=turn, content__type="markdown")
                 .order_by("global_offset").values_list("content__data", flat=True))
    assert texts == ["Reading.", "Done."]


def test_an_offer_from_another_user_or_device_is_not_taken(make_user, llm, wait_for) -> None:
    """Offers are checked against the RTC's owner before the worker goes on with one: an
    offer naming another user, or another device than the session's, is ignored (the model
    is never asked with it), and the real result goes on as usual."""
    wait_for(5.0)
    user, other = make_user(), make_user()
    _script(llm)
    session = _send(user)

    def forge_then_answer() -> None:
        rtc = _rtc_of(session, early=True)
        base = {"rtc": str(rtc.id), "status": "completed", "text": "forged"}
        assert queue.offer_result(rtc.id, {**base, "token": "t1", "user": other.id,
                                           "device": "d1"})
        assert queue.offer_result(rtc.id, {**base, "token": "t2", "user": user.id,
                                           "device": "another-device"})
        time.sleep(0.3)
        assert len(llm.requests) == 1  # neither was taken
        rtc_submit_result(user_id=user.id, rtc_id=rtc.id, success=True, result="the notes",
                          client_id="tab-1", device_id="d1")

    browser = _in_thread(forge_then_answer)
    _claim_and_run(_worker(llm))
    _join(browser)
    turn = Turn.objects.get(session_id=session.id)
    assert turn.status == "completed" and len(llm.requests) == 2
    assert "the notes" in llm.requests[1].body["messages"][-1]["content"]
    assert "forged" not in str(llm.requests[1].body["messages"])


def test_early_results_can_be_turned_off(make_user, llm, wait_for, settings) -> None:
    """``RTC_EARLY_RESULTS=false``: the waiting worker expects no offer (a submit offers its
    result to nobody) and goes on after the commit, as before."""
    settings.RTCAGENT = {**settings.RTCAGENT, "EARLY_RESULTS": False}
    wait_for(5.0)
    user = make_user()
    _script(llm)
    session = _send(user)
    offered: list[bool] = []

    def answer() -> None:
        rtc = _rtc_of(session)
        time.sleep(0.2)  # the worker waits by now
        offered.append(bool(get_redis().exists(queue.early_key(rtc.id))))
        rtc_submit_result(user_id=user.id, rtc_id=rtc.id, success=True, result="the notes",
                          client_id="tab-1", device_id="d1")

    browser = _in_thread(answer)
    _claim_and_run(_worker(llm))
    _join(browser)
    assert offered == [False]
    turn = Turn.objects.get(session_id=session.id)
    assert turn.status == "completed" and "interrupted" not in _turn_statuses(turn)
    assert "the notes" in llm.requests[1].body["messages"][-1]["content"]


def test_an_early_result_is_confirmed_by_the_database_when_no_wake_up_says(
        make_user, llm, wait_for, monkeypatch) -> None:
    """The commit's wake-up may carry no outcome (trimmed by a later one, or too long): the
    worker then confirms its early result from the stored message, whose text is the result
    as sent (PostgreSQL's ``jsonb`` reorders the RTC's copy of an object's keys)."""
    wait_for(5.0)
    user = make_user()
    _script(llm)
    session = _send(user)
    monkeypatch.setattr(queue, "wake_outcome", lambda **_: None)  # bare wake-ups only
    reached, release = _held_submit(monkeypatch)

    def answer() -> None:
        rtc = _rtc_of(session, early=True)
        rtc_submit_result(user_id=user.id, rtc_id=rtc.id, success=True,
                          result={"bb": 1, "a": [2]}, client_id="tab-1", device_id="d1")

    def release_once_asked() -> None:
        assert reached.wait(10)
        llm.wait_for_requests(2, timeout=10)  # the request left before the commit
        release.set()

    browser, releaser = _in_thread(answer), _in_thread(release_once_asked)
    _claim_and_run(_worker(llm))
    _join(browser)
    _join(releaser)
    turn = Turn.objects.get(session_id=session.id)
    assert turn.status == "completed" and "interrupted" not in _turn_statuses(turn)
    assert len(llm.requests) == 2
    assert llm.requests[1].body["messages"][-1]["content"] == '{"bb": 1, "a": [2]}'


def _conversation_reads() -> tuple[list[float], Callable[..., Any]]:
    """An execute wrapper noting when the conversation is read (``conversation._all_rows_sql``,
    by ``time.monotonic``), and the list it notes in."""
    from apps.turns import conversation

    sql = conversation._all_rows_sql()
    reads: list[float] = []

    def record(execute, statement, params, many, context):  # type: ignore[no-untyped-def]
        if sql in (statement or ""):
            reads.append(time.monotonic())
        return execute(statement, params, many, context)

    return reads, record


@pytest.mark.parametrize(("delay", "read_after"), [(0.05, False), (0.5, True)])
def test_the_next_requests_reads_are_made_while_the_tool_runs(
        make_user, llm, wait_for, delay: float, read_after: bool) -> None:
    """While the worker waits for the result it reads what the next request needs (the
    conversation, its summary, the reminders); a result within ``AHEAD_FRESH`` is sent with
    those rows and its own message, a later one has them read again. Either way the model
    gets the whole conversation."""
    from django.db import connection

    from apps.turns.context import AHEAD_FRESH

    assert (delay > AHEAD_FRESH) is read_after
    wait_for(5.0)
    user = make_user()
    _script(llm)
    session = _send(user)
    reads, record = _conversation_reads()
    submitted: list[float] = []

    def answer() -> None:
        rtc = _rtc_of(session, early=True)
        time.sleep(delay)
        submitted.append(time.monotonic())
        rtc_submit_result(user_id=user.id, rtc_id=rtc.id, success=True, result="the notes",
                          client_id="tab-1", device_id="d1")

    browser = _in_thread(answer)
    with connection.execute_wrapper(record):
        _claim_and_run(_worker(llm))
    _join(browser)
    turn = Turn.objects.get(session_id=session.id)
    assert turn.status == "completed" and "interrupted" not in _turn_statuses(turn)
    assert (reads[-1] > submitted[0]) is read_after
    roles = [m["role"] for m in llm.requests[1].body["messages"]]
    assert roles[:4] == ["system", "user", "assistant", "tool"]
    assert "the notes" in llm.requests[1].body["messages"][-1]["content"]


def test_a_server_tool_after_a_quick_result_is_in_the_next_request(
        make_user, llm, wait_for) -> None:
    """An answer calls a browser tool, then a server tool (the todo list): the browser's
    quick result goes on in place, the server tool writes its result and changes what the
    prompt's reminders say; the next request has both results and the new list, not the rows
    read ahead while the browser ran its tool."""
    wait_for(5.0)
    user = make_user()
    llm.enqueue({"content": "Reading, then planning.", "tool_calls": [
        {"name": "read", "arguments": {"path": "/a.md"}},
        {"name": "todoWrite", "arguments": {"todos": [
            {"content": "Write the summary", "status": "in_progress"}]}}]})
    llm.enqueue({"content": "Done."})
    session = _send(user)
    browser = _browser(user, session, early=True)
    _claim_and_run(_worker(llm))
    _join(browser)
    turn = Turn.objects.get(session_id=session.id)
    assert turn.status == "completed" and "interrupted" not in _turn_statuses(turn)
    messages = llm.requests[1].body["messages"]
    tools = [m for m in messages if m["role"] == "tool"]
    assert len(tools) == 2 and "the notes" in tools[0]["content"]
    assert "Write the summary" in str(messages[-1]["content"])  # the reminder, as written


def test_a_submit_failing_at_its_commit_withdraws_its_early_result(
        make_user, llm, wait_for, monkeypatch) -> None:
    """A submit's transaction can fail at its ``COMMIT`` (PostgreSQL checks its deferred
    foreign keys there, and a batched transaction's last inserts go with it), after its body
    ran: its offer is withdrawn then too, and the worker drops what it began at once rather
    than after waiting out ``EARLY_CONFIRM_WAIT`` for a commit."""
    from django.db import OperationalError, connections

    from apps.turns.runner import EARLY_CONFIRM_WAIT

    wait_for(5.0)
    user = make_user()
    llm.enqueue({"content": "Reading.", "tool_calls": [
        {"name": "read", "arguments": {"path": "/a.md"}}]})
    llm.enqueue({"content": "Never shown."})
    session = _send(user)
    failed: list[BaseException] = []
    here = threading.local()
    backend = type(connections["default"])
    commit = backend._commit

    def failing_commit(self: Any) -> None:
        if getattr(here, "fail", False):
            raise OperationalError("the commit failed")
        commit(self)

    monkeypatch.setattr(backend, "_commit", failing_commit)

    def answer() -> None:
        rtc = _rtc_of(session, early=True)
        here.fail = True  # this thread's commits fail: the submit's
        try:
            rtc_submit_result(user_id=user.id, rtc_id=rtc.id, success=True, result="the notes",
                              client_id="tab-1", device_id="d1")
        except OperationalError as exc:
            failed.append(exc)

    browser = _in_thread(answer)
    started = time.monotonic()
    _claim_and_run(_worker(llm))
    _join(browser)
    assert failed, "the submit should have failed at its commit"
    assert time.monotonic() - started < EARLY_CONFIRM_WAIT / 2  # withdrawn, not waited out
    turn = Turn.objects.get(session_id=session.id)
    assert turn.status == "interrupted"
    assert Rtc.objects.get(turn=turn).status == "pending"
    assert not Message.objects.filter(turn=turn, content__data="Never shown.").exists()
