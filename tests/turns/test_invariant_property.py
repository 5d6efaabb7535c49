"""The invariant, as a property: whatever happens (send, tool calls, stop, reject, timeout,
compaction, a crash at any point, fork, a late result), every prompt sent has each tool call
followed by its result and each result after its call, and the validator never had to repair
one (a repair is a bug upstream).

Hypothesis draws sequences of operations; each runs through the real services and the real
worker code in this process, against the real database and Redis. The model is an in-process
``ChatModel`` that checks every request it receives and answers as the sequence says. A small
context window makes auto compact and the reactive levels part of the runs.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.rtc.models import TERMINAL_RTC_STATUSES, Rtc
from apps.rtc.services import rtc_submit_result, rtc_timeout, rtc_update_status
from apps.sessions.models import Message, Session
from apps.sessions.services import message_send, session_fork
from apps.turns.compaction import SUMMARIZER, request_compaction
from apps.turns.llm import Cancelled, Finish, TextDelta, ToolCall, Usage
from apps.turns.llm_errors import LLMError
from apps.turns.models import ACTIVE_TURN_STATUSES, Turn
from apps.turns.prompt import violations
from apps.turns.runner import HoldLost
from apps.turns.services import turn_stop
from apps.turns.worker import Worker
from tests.turns.test_context_kit import MODEL, set_profile

pytestmark = [pytest.mark.django_db(transaction=True)]

ANSWERS = ["text", "read", "ls", "grep", "askUser", "edit", "two", "server", "too_long", "stop"]
CALLS = {
    "read": ("read", '{"path": "/notes.md"}'),
    "ls": ("ls", "{}"),
    "grep": ("grep", '{"pattern": "todo"}'),
    "askUser": ("askUser", '{"questions": [{"question": "Which?", "header": "Pick", '
                           '"options": [{"label": "A"}, {"label": "B"}]}]}'),
    "edit": ("edit", '{"path": "/notes.md", "old_string": "a", "new_string": "b"}'),
    "server": ("searchMemory", '{"query": "notes"}'),
}


def check_pairs(messages: list[dict[str, Any]]) -> None:
    """Independently of the validator: results right after their call, in a block."""
    open_ids: list[str] = []
    for m in messages:
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_ids, f"a result without its call: {m}"
            open_ids.remove(m["tool_call_id"])
            continue
        assert open_ids == [], f"calls without results: {open_ids}"
        if m["role"] == "assistant" and m.get("tool_calls"):
            open_ids = [c["id"] for c in m["tool_calls"]]
            assert len(set(open_ids)) == len(open_ids)
        if m["role"] == "assistant":
            assert m.get("content") is not None or m.get("tool_calls")
    assert open_ids == [], f"calls without results: {open_ids}"


class CheckingModel:
    """An in-process ``ChatModel``: checks each request, answers from ``plan`` (text when it
    is empty), and summary requests with a short summary."""

    model = MODEL

    def __init__(self) -> None:
        self.plan: list[str] = []
        self.requests: list[list[dict[str, Any]]] = []
        self.calls = 0

    def stream(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *,
               should_cancel: Any = None) -> Any:
        assert violations(messages) == [], messages
        check_pairs(messages)
        self.requests.append(messages)
        if messages[0]["content"].startswith(SUMMARIZER):
            yield TextDelta(f"Summary {len(self.requests)}: the user works on notes.")
            yield Finish("stop")
            return
        assert tools, "the agent always has tools"
        action = self.plan.pop(0) if self.plan else "text"
        self.calls += 1
        if action == "too_long":
            raise LLMError("context", "Conversation too long", "too long", raw_error="400")
        yield TextDelta("Working")
        if should_cancel is not None and should_cancel():
            raise Cancelled()
        if action == "stop":
            turn = Turn.objects.filter(status__in=ACTIVE_TURN_STATUSES).order_by(
                "-created_at").first()
            turn_stop(user_id=turn.user_id, session_id=turn.session_id)
            deadline = time.monotonic() + 1
            while time.monotonic() < deadline:  # the adapter polls between chunks
                if should_cancel():
                    raise Cancelled()
                time.sleep(0.05)
            raise AssertionError("the stop was not seen")
        yield TextDelta(" on it.")
        n = self.calls
        if action in CALLS:
            name, arguments = CALLS[action]
            yield ToolCall(f"call_{n}", name, arguments)
        elif action == "two":
            yield ToolCall("call_0", "read", '{"path": "/a.md"}')  # ids reused across answers
            yield ToolCall("call_1", "ls", "{}")
        yield Usage(prompt_tokens=100, completion_tokens=5, cached_tokens=0, total_tokens=105)
        yield Finish("tool_calls" if action in CALLS or action == "two" else "stop")


class FlakyHold:
    """A hold that is lost after ``checks`` looks at it: the worker dies at that point."""

    def __init__(self, checks: int) -> None:
        self.left = checks

    @property
    def lost(self) -> bool:
        self.left -= 1
        return self.left < 0


class Run:
    """The sessions of one user, and what has happened to them."""

    def __init__(self, user: Any, model: CheckingModel) -> None:
        self.user = user
        self.model = model
        self.session_id: str | None = None
        self.crash_after: int | None = None

    def worker(self, crash: bool = True) -> Worker:
        worker = Worker(llm_factory=lambda: self.model)
        if crash and self.crash_after is not None:
            worker._hold = FlakyHold(self.crash_after)
            self.crash_after = None
        return worker

    def work(self, session_id: str, item: dict[str, Any]) -> None:
        """Run a queue item; if the worker dies, the item is delivered again (to a healthy
        worker), as the lease and the sweep do."""
        try:
            self.worker().handle(session_id, item)
        except HoldLost:
            self.worker(crash=False).handle(session_id, item)

    def active(self) -> Turn | None:
        return Turn.objects.filter(session_id=self.session_id,
                                   status__in=ACTIVE_TURN_STATUSES).first()

    def pending(self) -> Rtc | None:
        return (Rtc.objects.filter(session_id=self.session_id)
                .exclude(status__in=TERMINAL_RTC_STATUSES).first())

    # --- operations ---

    def apply(self, op: str, args: list[Any]) -> None:
        """Run ``op``; one that cannot apply now becomes one that can (a result while nothing
        waits is a new message, a message while a call waits is its result), so that every
        drawn operation moves the session on."""
        waiting = self.pending() is not None
        if op == "crash":
            self.crash_after = args[0]
        elif op in ("submit", "reject", "timeout") and not waiting:
            self.send(len(args) * 60, args[-1])
        elif op in ("send", "compact") and waiting:
            self.submit(200, True, args[-1] if args else "text")
        else:
            getattr(self, op)(*args)

    def send(self, size: int, answer: str) -> None:
        if self.session_id is not None and self.active() is not None:
            return  # it would wait behind the open turn
        self.model.plan.append(answer)
        sent = message_send(
            user_id=self.user.id, device_id="",
            content={"type": "user_message", "data": {"text": "please " + "note " * size}},
            client_id=str(uuid.uuid4()), server_session_id=self.session_id,
        )
        self.session_id = str(sent.session.id)
        self.work(self.session_id, {"kind": "message", "message_id": str(sent.message.id)})

    def resume(self, rtc: Rtc) -> None:
        self.work(str(rtc.session_id), {"kind": "resume", "turn_id": str(rtc.turn_id)})

    def submit(self, size: int, ok: bool, answer: str) -> None:
        rtc = self.pending()
        if rtc is None:
            return
        self.model.plan.append(answer)
        rtc_submit_result(user_id=self.user.id, rtc_id=rtc.id, success=ok,
                          result="line\n" * size if ok else None, error="" if ok else "broke")
        self.resume(rtc)

    def reject(self, answer: str) -> None:
        rtc = self.pending()
        if rtc is None:
            return
        self.model.plan.append(answer)
        rtc_update_status(user_id=self.user.id, rtc_id=rtc.id, status="rejected", reason="no")
        self.resume(rtc)

    def timeout(self, answer: str) -> None:
        rtc = self.pending()
        if rtc is None:
            return
        self.model.plan.append(answer)
        rtc_timeout(rtc_id=rtc.id)
        self.resume(rtc)

    def stop(self) -> None:
        if self.session_id is not None:
            turn_stop(user_id=self.user.id, session_id=self.session_id)

    def compact(self) -> None:
        if self.session_id is None or self.active() is not None:
            return  # compaction items wait behind the turn
        request_compaction(Session.objects.get(pk=self.session_id), "keep names")
        self.work(self.session_id, {"kind": "compact", "session_id": self.session_id,
                                    "instruction": "keep names"})

    def fork(self, pick: int, answer: str) -> None:
        if self.session_id is None:
            return
        anchors = list(Message.objects.filter(session_id=self.session_id)
                       .order_by("global_offset"))
        self.model.plan.append(answer)
        forked = session_fork(
            user_id=self.user.id, device_id="", old_session_id=self.session_id,
            old_message_id=anchors[pick % len(anchors)].id, new_client_session_id="fork",
            new_client_message_id=str(uuid.uuid4()),
            content={"type": "user_message", "data": {"text": "continue from here"}},
        )
        self.session_id = str(forked.session.id)
        self.work(self.session_id, {"kind": "message", "message_id": str(forked.messages[-1].id)})

    def late(self) -> None:
        done = (Rtc.objects.filter(session_id=self.session_id, status__in=TERMINAL_RTC_STATUSES)
                .order_by("-created_at").first())
        if done is None:
            return
        rtc_submit_result(user_id=self.user.id, rtc_id=done.id, success=True, result="late")
        self.resume(done)


answer = st.sampled_from(ANSWERS)
submit = st.tuples(st.just("submit"), st.integers(1, 900), st.booleans(), answer)
operation = st.one_of(
    st.tuples(st.just("send"), st.integers(1, 400), answer),
    submit, submit, submit,  # most of what happens: the browser answers
    st.tuples(st.just("reject"), answer),
    st.tuples(st.just("timeout"), answer),
    st.tuples(st.just("stop")),
    st.tuples(st.just("compact")),
    st.tuples(st.just("crash"), st.integers(0, 12)),
    st.tuples(st.just("fork"), st.integers(0, 50), answer),
    st.tuples(st.just("late")),
)


class Repairs(logging.Handler):
    """Errors logged by the validator: each one is a prompt that needed repairing."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(operation, min_size=4, max_size=20))
def test_every_prompt_has_whole_pairs(make_user: Any, ops: list[tuple[Any, ...]]) -> None:
    # A small window, and a cache always cold: compaction and microcompact at every turn.
    set_profile(context_window=4000, max_output_tokens=300, autocompact_buffer=1000,
                tool_result_budget=600, keep_recent_tool_results=2, cache_cold_seconds=0)
    model = CheckingModel()
    run = Run(make_user(), model)
    repairs = Repairs()
    logging.getLogger("apps.turns.engine").addHandler(repairs)
    try:
        run.send(5, "read")
        for op, *args in ops:
            run.apply(op, args)
    finally:
        logging.getLogger("apps.turns.engine").removeHandler(repairs)
    assert [r.getMessage() for r in repairs.records] == []
    assert model.requests  # something was sent, and every request was checked
