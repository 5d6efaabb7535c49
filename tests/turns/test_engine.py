"""The turn loop with in-memory ports and a scripted model: answers, browser and server tools,
cancellation, failures, the step guard, and crashes at every port call."""

from __future__ import annotations

import ast
import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from apps.turns import engine
from apps.turns.engine import (
    CANCELLED,
    COMPLETED,
    FAILED,
    MAX_STEPS,
    WAITING,
    Checkpoint,
    RtcOutcome,
    advance,
)
from apps.turns.llm import Cancelled, Finish, ReasoningDelta, TextDelta, ToolCall, Usage
from apps.turns.llm_errors import LLMError

HISTORY = [
    {"role": "system", "content": "You are a test agent."},
    {"role": "user", "content": "Look at /a"},
]
CRASHABLE = {"save", "finish_answer", "delta", "record_call", "record_result", "create_rtc",
             "rtc_outcome", "wait"}


class Crash(Exception):
    """A simulated process death inside a port."""


def schema(name: str) -> dict[str, Any]:
    return {"type": "function",
            "function": {"name": name, "description": name,
                         "parameters": {"type": "object", "properties": {}}}}


def assistant_calls(*calls: tuple[str, str, str], content: str | None = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
        for i, n, a in calls
    ]}


def tool_result(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def assert_pairs_complete(messages: list[dict[str, Any]]) -> None:
    """Every assistant tool call is followed by its result, and every result follows its call."""
    open_ids: list[str] = []
    for m in messages:
        if m["role"] == "tool":
            assert open_ids, f"a tool result without its call: {m}"
            assert m["tool_call_id"] == open_ids.pop(0)
            continue
        assert open_ids == [], f"tool calls without results: {open_ids}"
        if m["role"] == "assistant" and m.get("tool_calls"):
            open_ids = [c["id"] for c in m["tool_calls"]]
    assert open_ids == [], f"tool calls without results: {open_ids}"


class ScriptedModel:
    """A ``ChatModel`` whose n-th answer is picked by how many assistant messages the request
    holds, so an answer asked again after a crash is the same answer."""

    def __init__(self, *answers: list[Any]) -> None:
        self.answers = answers
        self.requests: list[list[dict[str, Any]]] = []
        self.tools: list[list[dict[str, Any]] | None] = []

    def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        should_cancel: Callable[[], bool] | None = None,
    ) -> Iterator[Any]:
        request = copy.deepcopy(messages)
        self.requests.append(request)
        self.tools.append(tools)
        assert_pairs_complete(request)
        n = sum(1 for m in request if m["role"] == "assistant")
        for event in self.answers[n]:
            if should_cancel is not None and should_cancel():  # as the adapter, between chunks
                raise Cancelled()
            if isinstance(event, BaseException):
                raise event
            yield event


class FakePorts:
    """``TurnPorts`` in memory, idempotent where the Django adapter is (one RTC per tool call id,
    one message per key), with the checkpoint kept as JSON like in Redis."""

    def __init__(
        self,
        llm: ScriptedModel,
        *,
        browser_tools: tuple[str, ...] = ("read", "write"),
        server_tools: dict[str, Callable[[dict[str, Any]], str]] | None = None,
    ) -> None:
        self.llm = llm
        self.browser_tools = browser_tools
        self.server_tools = server_tools or {}
        self.stored: str | None = None
        self.log: list[str] = []
        self.saves: list[dict[str, Any]] = []
        self.deltas: list[tuple[int, str, str]] = []
        self.answers: dict[int, dict[str, Any]] = {}
        self.calls: dict[str, dict[str, Any]] = {}
        self.results: dict[str, dict[str, Any]] = {}
        self.rtcs: dict[str, dict[str, Any]] = {}
        self.rtc_requests: list[str] = []
        self.outcomes: dict[str, RtcOutcome] = {}
        self.server_runs: list[tuple[str, dict[str, Any]]] = []
        self.completed: list[Checkpoint] = []
        self.cancelled: list[Checkpoint] = []
        self.failed: list[LLMError] = []
        self.stop = False
        self.stop_after_deltas: int | None = None
        self.crash_at: int | None = None  # crash in the n-th crashable port call, after its effect
        self.crashable_calls = 0

    def _did(self, name: str) -> None:
        self.log.append(name)
        if name in CRASHABLE:
            self.crashable_calls += 1
            if self.crash_at == self.crashable_calls:
                self.crash_at = None
                raise Crash(name)

    def checkpoint(self) -> dict[str, Any] | None:
        return json.loads(self.stored) if self.stored else None

    def finish_rtc(self, call_id: str, text: str) -> None:
        self.outcomes[self.rtcs[call_id]["id"]] = RtcOutcome(True, text)

    # --- the ports ---------------------------------------------------------------------------

    def load(self) -> Checkpoint | None:
        data = self.checkpoint()
        return Checkpoint.from_json(data) if data else None

    def save(self, cp: Checkpoint) -> None:
        self.stored = json.dumps(cp.to_json())
        self.saves.append(json.loads(self.stored))
        self._did("save")

    def history(self) -> list[dict[str, Any]]:
        return copy.deepcopy(HISTORY)

    def tools(self) -> list[dict[str, Any]]:
        return [schema(n) for n in (*self.browser_tools, *self.server_tools)]

    def should_cancel(self) -> bool:
        if self.stop_after_deltas is not None and len(self.deltas) >= self.stop_after_deltas:
            return True
        return self.stop

    def delta(self, step: int, kind: str, text: str) -> None:
        self.deltas.append((step, kind, text))
        self._did("delta")

    def finish_answer(self, step: int, text: str, reasoning: str, usage: Usage | None,
                      *, cancelled: bool = False) -> None:
        self.answers[step] = {"text": text, "reasoning": reasoning, "usage": usage,
                              "cancelled": cancelled}
        self._did("finish_answer")

    def is_server_tool(self, name: str) -> bool:
        return name in self.server_tools

    def run_server_tool(self, name: str, arguments: dict[str, Any]) -> str:
        self.server_runs.append((name, arguments))
        self.log.append("run_server_tool")
        return self.server_tools[name](arguments)

    def record_call(self, step: int, call: dict[str, Any]) -> None:
        self.calls.setdefault(call["id"], {"step": step, **call})
        self._did("record_call")

    def record_result(self, step: int, call: dict[str, Any], output: str, status: str) -> None:
        self.results.setdefault(call["id"], {"step": step, "output": output, "status": status})
        self._did("record_result")

    def create_rtc(self, step: int, call: dict[str, Any], arguments: dict[str, Any],
                   cp: Checkpoint) -> str:
        # one transaction: the RTC and the checkpoint naming its call and waiting on it
        assert call["id"] in [c["id"] for c in cp.calls], (
            "an RTC was created with a checkpoint that does not name its tool call")
        self.rtc_requests.append(call["id"])
        if call["id"] not in self.rtcs:
            self.rtcs[call["id"]] = {"id": f"rtc-{len(self.rtcs) + 1}", "step": step,
                                     "name": call["name"], "arguments": arguments}
        rtc_id = self.rtcs[call["id"]]["id"]
        self.stored = json.dumps({**cp.to_json(), "waiting_rtc": rtc_id})
        self.saves.append(json.loads(self.stored))
        self._did("create_rtc")
        return rtc_id

    def rtc_outcome(self, rtc_id: str) -> RtcOutcome:
        self._did("rtc_outcome")
        return self.outcomes.get(rtc_id, RtcOutcome(False, ""))

    def wait(self) -> None:
        cp = self.checkpoint()
        assert cp is not None and cp["waiting_rtc"] in [r["id"] for r in self.rtcs.values()], (
            "the turn waits, but the checkpoint does not name the RTC")
        self._did("wait")

    def complete(self, cp: Checkpoint) -> None:
        self.completed.append(copy.deepcopy(cp))
        self.stored = None
        self.log.append("complete")

    def cancel(self, cp: Checkpoint) -> None:
        self.cancelled.append(copy.deepcopy(cp))
        self.stored = None
        self.log.append("cancel")

    def fail(self, error: LLMError) -> None:
        self.failed.append(error)
        self.stored = None
        self.log.append("fail")


def test_text_only_answer_completes_with_deltas_and_transcript() -> None:
    usage = Usage(prompt_tokens=12, completion_tokens=3, cached_tokens=4, total_tokens=15)
    llm = ScriptedModel([ReasoningDelta("Easy."), TextDelta("Hel"), TextDelta("lo"), usage,
                         Finish("stop")])
    ports = FakePorts(llm)

    assert advance(ports) == COMPLETED

    assert llm.requests == [HISTORY]
    assert llm.tools == [[schema("read"), schema("write")]]
    assert ports.deltas == [(0, "thinking", "Easy."), (0, "markdown", "Hel"),
                            (0, "markdown", "lo")]
    assert ports.answers == {0: {"text": "Hello", "reasoning": "Easy.", "usage": usage,
                                 "cancelled": False}}
    assert ports.log == ["delta", "delta", "delta", "finish_answer", "complete"]
    assert [cp.to_json() for cp in ports.completed] == [{
        "step": 1, "transcript": [{"role": "assistant", "content": "Hello"}], "answer": None,
        "calls": [], "results": [], "waiting_rtc": "",
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "cached_tokens": 4,
                  "total_tokens": 15},
    }]
    assert ports.rtc_requests == []
    assert ports.cancelled == [] and ports.failed == []


def test_no_tools_are_offered_as_none() -> None:
    llm = ScriptedModel([TextDelta("Hi"), Finish("stop")])

    assert advance(FakePorts(llm, browser_tools=())) == COMPLETED

    assert llm.tools == [None]


def test_browser_tool_call_creates_one_rtc_with_the_checkpoint_that_names_it() -> None:
    llm = ScriptedModel([TextDelta("Looking."), ToolCall("c1", "read", '{"path": "/a"}'),
                         Finish("tool_calls")])
    ports = FakePorts(llm)

    assert advance(ports) == WAITING

    # the answer is stored once, in the RTC's transaction, already waiting on it
    assert ports.log == ["delta", "finish_answer", "record_call", "create_rtc", "rtc_outcome",
                         "wait"]
    answer = assistant_calls(("c1", "read", '{"path": "/a"}'), content="Looking.")
    calls = [{"id": "c1", "name": "read", "arguments": '{"path": "/a"}'}]
    base = {"step": 1, "transcript": [], "answer": answer, "calls": calls, "results": [],
            "usage": {}}
    assert ports.saves == [{**base, "waiting_rtc": "rtc-1"}]
    assert ports.rtc_requests == ["c1"]
    assert ports.rtcs == {"c1": {"id": "rtc-1", "step": 1, "name": "read",
                                 "arguments": {"path": "/a"}}}
    assert ports.calls == {"c1": {"step": 1, **calls[0]}}
    assert ports.results == {}
    assert ports.answers == {0: {"text": "Looking.", "reasoning": "", "usage": None,
                                 "cancelled": False}}
    assert len(llm.requests) == 1
    assert ports.completed == [] and ports.cancelled == [] and ports.failed == []


def test_resume_with_an_unfinished_rtc_waits_again_and_changes_nothing() -> None:
    llm = ScriptedModel([ToolCall("c1", "read", "{}"), Finish("tool_calls")])
    ports = FakePorts(llm)
    assert advance(ports) == WAITING
    stored, ports.log = ports.stored, []

    assert advance(ports) == WAITING

    assert ports.log == ["rtc_outcome", "wait"]
    assert ports.stored == stored
    assert ports.rtc_requests == ["c1"]
    assert ports.results == {}
    assert len(llm.requests) == 1


def test_resume_with_a_finished_rtc_sends_the_call_together_with_its_result() -> None:
    llm = ScriptedModel(
        [TextDelta("Looking."), ToolCall("c1", "read", '{"path": "/a"}'), Finish("tool_calls")],
        [TextDelta("It says hello."), Finish("stop")],
    )
    ports = FakePorts(llm)
    assert advance(ports) == WAITING
    ports.finish_rtc("c1", "hello\n")
    ports.log = []

    assert advance(ports) == COMPLETED

    # no save before the model is asked: the stored checkpoint waits on the finished RTC, so
    # a restart records the same result again; the next answer's save (here the end) stores it
    assert ports.log == ["rtc_outcome", "record_result", "delta", "finish_answer", "complete"]
    assert ports.results == {"c1": {"step": 1, "output": "hello\n", "status": "done"}}
    pair = [assistant_calls(("c1", "read", '{"path": "/a"}'), content="Looking."),
            tool_result("c1", "hello\n")]
    assert llm.requests == [HISTORY, HISTORY + pair]
    assert ports.completed[0].transcript == [
        *pair, {"role": "assistant", "content": "It says hello."}]
    assert ports.completed[0].step == 2
    assert ports.rtc_requests == ["c1"]
    assert ports.answers[1] == {"text": "It says hello.", "reasoning": "", "usage": None,
                                "cancelled": False}


def test_an_answer_without_text_sends_content_none_with_its_calls() -> None:
    llm = ScriptedModel([ToolCall("c1", "read", "{}"), Finish("tool_calls")],
                        [TextDelta("ok"), Finish("stop")])
    ports = FakePorts(llm)
    assert advance(ports) == WAITING
    ports.finish_rtc("c1", "x")

    assert advance(ports) == COMPLETED

    assert llm.requests[1] == [*HISTORY, assistant_calls(("c1", "read", "{}")),
                                         tool_result("c1", "x")]
    assert ports.answers[0]["text"] == ""


def test_two_tool_calls_of_one_answer_are_dispatched_one_after_the_other() -> None:
    llm = ScriptedModel(
        [ToolCall("c1", "read", '{"path": "/a"}'), ToolCall("c2", "write", '{"path": "/b"}'),
         Finish("tool_calls")],
        [TextDelta("Both done."), Finish("stop")],
    )
    ports = FakePorts(llm)

    assert advance(ports) == WAITING
    assert ports.rtc_requests == ["c1"]
    assert ports.checkpoint()["waiting_rtc"] == "rtc-1"

    assert advance(ports) == WAITING  # the first RTC is still open: nothing else happens
    assert ports.rtc_requests == ["c1"]

    ports.finish_rtc("c1", "A")
    assert advance(ports) == WAITING
    assert ports.rtc_requests == ["c1", "c2"]
    assert ports.results == {"c1": {"step": 1, "output": "A", "status": "done"}}
    assert ports.checkpoint()["waiting_rtc"] == "rtc-2"
    assert ports.checkpoint()["transcript"] == []  # the pair is not complete yet
    assert len(llm.requests) == 1

    ports.finish_rtc("c2", "B")
    assert advance(ports) == COMPLETED
    assert ports.rtcs["c2"] == {"id": "rtc-2", "step": 1, "name": "write",
                                "arguments": {"path": "/b"}}
    assert llm.requests[1] == [
        *HISTORY,
        assistant_calls(("c1", "read", '{"path": "/a"}'), ("c2", "write", '{"path": "/b"}')),
        tool_result("c1", "A"), tool_result("c2", "B"),
    ]
    assert ports.log.count("wait") == 3


def test_server_tool_runs_in_process_without_an_rtc() -> None:
    llm = ScriptedModel(
        [ToolCall("c1", "clock", '{"tz": "UTC"}'), Finish("tool_calls")],
        [TextDelta("It is noon."), Finish("stop")],
    )
    ports = FakePorts(llm, server_tools={"clock": lambda args: f"12:00 {args['tz']}"})

    assert advance(ports) == COMPLETED

    assert ports.server_runs == [("clock", {"tz": "UTC"})]
    assert ports.rtc_requests == []
    assert ports.results == {"c1": {"step": 1, "output": "12:00 UTC", "status": "done"}}
    assert llm.requests[1] == [*HISTORY, assistant_calls(("c1", "clock", '{"tz": "UTC"}')),
                                         tool_result("c1", "12:00 UTC")]
    assert "wait" not in ports.log


def test_a_failing_server_tool_becomes_a_tool_error_for_the_model() -> None:
    def broken(args: dict[str, Any]) -> str:
        raise RuntimeError("clock is broken")

    llm = ScriptedModel([ToolCall("c1", "clock", "{}"), Finish("tool_calls")],
                        [TextDelta("Sorry."), Finish("stop")])
    ports = FakePorts(llm, server_tools={"clock": broken})

    assert advance(ports) == COMPLETED

    assert ports.results == {"c1": {"step": 1, "output": "[Tool Error] clock is broken",
                                    "status": "done"}}
    assert llm.requests[1][-1] == tool_result("c1", "[Tool Error] clock is broken")


def test_unknown_tool_yields_a_tool_error_without_an_rtc() -> None:
    llm = ScriptedModel([ToolCall("c1", "rm_rf", "{}"), Finish("tool_calls")],
                        [TextDelta("I cannot."), Finish("stop")])
    ports = FakePorts(llm)

    assert advance(ports) == COMPLETED

    assert ports.rtc_requests == []
    assert ports.results == {"c1": {"step": 1, "output": "[Tool Error] unknown tool 'rm_rf'",
                                    "status": "error"}}
    assert llm.requests[1] == [*HISTORY, assistant_calls(("c1", "rm_rf", "{}")),
                                         tool_result("c1", "[Tool Error] unknown tool 'rm_rf'")]


def test_arguments_that_are_not_a_json_object_yield_tool_errors_without_an_rtc() -> None:
    llm = ScriptedModel(
        [ToolCall("c1", "read", '{"path": '), ToolCall("c2", "read", '["/a"]'),
         Finish("tool_calls")],
        [TextDelta("Oops."), Finish("stop")],
    )
    ports = FakePorts(llm)

    assert advance(ports) == COMPLETED

    error = "[Tool Error] the arguments are not a JSON object"
    assert ports.rtc_requests == []
    assert ports.results == {"c1": {"step": 1, "output": error, "status": "error"},
                             "c2": {"step": 1, "output": error, "status": "error"}}
    assert llm.requests[1] == [
        *HISTORY,
        assistant_calls(("c1", "read", '{"path": '), ("c2", "read", '["/a"]')),
        tool_result("c1", error), tool_result("c2", error),
    ]


def test_cancel_while_streaming_finishes_the_partial_answer_and_cancels() -> None:
    llm = ScriptedModel([ReasoningDelta("Hm"), TextDelta("Hel"), TextDelta("lo "),
                         TextDelta("world"), Finish("stop")])
    ports = FakePorts(llm)
    ports.stop_after_deltas = 3

    assert advance(ports) == CANCELLED

    assert ports.deltas == [(0, "thinking", "Hm"), (0, "markdown", "Hel"),
                            (0, "markdown", "lo ")]
    assert ports.answers == {0: {"text": "Hello ", "reasoning": "Hm", "usage": None,
                                 "cancelled": True}}
    assert ports.log == ["delta", "delta", "delta", "finish_answer", "cancel"]
    assert [cp.to_json() for cp in ports.cancelled] == [Checkpoint().to_json()]
    assert ports.completed == [] and ports.failed == []


def test_stop_before_the_next_answer_cancels_without_asking_the_model() -> None:
    llm = ScriptedModel([ToolCall("c1", "read", "{}"), Finish("tool_calls")],
                        [TextDelta("never"), Finish("stop")])
    ports = FakePorts(llm)
    assert advance(ports) == WAITING
    ports.finish_rtc("c1", "A")
    ports.stop = True

    assert advance(ports) == CANCELLED

    assert len(llm.requests) == 1
    assert ports.results == {"c1": {"step": 1, "output": "A", "status": "done"}}
    assert ports.cancelled[0].transcript == [assistant_calls(("c1", "read", "{}")),
                                             tool_result("c1", "A")]
    assert ports.log[-1] == "cancel"


def test_stop_while_an_rtc_waits_dispatches_no_further_tool_call() -> None:
    llm = ScriptedModel([ToolCall("c1", "read", "{}"), ToolCall("c2", "write", "{}"),
                         Finish("tool_calls")])
    ports = FakePorts(llm)
    assert advance(ports) == WAITING
    ports.stop = True
    ports.finish_rtc("c1", "[Tool Error] the turn was stopped")

    assert advance(ports) == CANCELLED

    assert ports.rtc_requests == ["c1"]
    assert ports.results == {"c1": {"step": 1, "output": "[Tool Error] the turn was stopped",
                                    "status": "done"}}
    assert "c2" not in ports.calls
    assert len(ports.cancelled) == 1
    assert len(llm.requests) == 1


def test_llm_error_fails_the_turn() -> None:
    error = LLMError("api", "Rate limited", "The model provider is rate limiting requests.",
                     retryable=True, status=429)
    llm = ScriptedModel([error])
    ports = FakePorts(llm)

    assert advance(ports) == FAILED

    assert ports.failed == [error]
    assert ports.log == ["fail"]
    assert ports.answers == {} and ports.completed == [] and ports.cancelled == []


def test_llm_error_after_a_tool_round_fails_the_turn() -> None:
    error = LLMError("context", "Conversation too long", "Start a new session.")
    llm = ScriptedModel([ToolCall("c1", "read", "{}"), Finish("tool_calls")], [error])
    ports = FakePorts(llm)
    assert advance(ports) == WAITING
    ports.finish_rtc("c1", "A")

    assert advance(ports) == FAILED

    assert ports.failed == [error]
    assert len(llm.requests) == 2
    assert ports.log[-1] == "fail"


def test_max_steps_stops_a_turn_that_keeps_calling_tools() -> None:
    llm = ScriptedModel(*([ToolCall(f"c{n}", "clock", "{}"), Finish("tool_calls")]
                          for n in range(MAX_STEPS + 1)))
    ports = FakePorts(llm, server_tools={"clock": lambda args: "12:00"})

    assert advance(ports) == FAILED

    assert len(llm.requests) == MAX_STEPS
    assert len(ports.server_runs) == MAX_STEPS
    assert [(e.category, e.title, e.message, e.retryable) for e in ports.failed] == [
        ("tool", "Too many steps",
         f"The agent stopped after {MAX_STEPS} model answers in one turn.", False)]
    assert ports.saves[-1]["step"] == MAX_STEPS
    assert len(ports.saves[-1]["transcript"]) == 2 * MAX_STEPS


def test_max_steps_is_checked_on_resume_before_asking_the_model() -> None:
    llm = ScriptedModel()
    ports = FakePorts(llm)
    ports.save(Checkpoint(step=MAX_STEPS))

    assert advance(ports) == FAILED

    assert llm.requests == []
    assert [e.title for e in ports.failed] == ["Too many steps"]


def test_crash_after_the_rtc_was_committed_resumes_waiting_on_it() -> None:
    llm = ScriptedModel([ToolCall("c1", "read", "{}"), Finish("tool_calls")],
                        [TextDelta("ok"), Finish("stop")])
    ports = FakePorts(llm)
    ports.crash_at = 3  # finish_answer, record_call, create_rtc

    with pytest.raises(Crash, match=r"^create_rtc$"):
        advance(ports)
    assert ports.checkpoint()["waiting_rtc"] == "rtc-1"  # committed with the RTC

    assert advance(ports) == WAITING

    assert ports.rtc_requests == ["c1"]
    assert list(ports.rtcs) == ["c1"]
    assert len(llm.requests) == 1
    ports.finish_rtc("c1", "A")
    assert advance(ports) == COMPLETED
    assert ports.results == {"c1": {"step": 1, "output": "A", "status": "done"}}


def test_crash_before_the_rtc_was_committed_asks_the_model_again_for_one_rtc() -> None:
    llm = ScriptedModel([ToolCall("c1", "read", "{}"), Finish("tool_calls")],
                        [ToolCall("c1", "read", "{}"), Finish("tool_calls")],
                        [TextDelta("ok"), Finish("stop")])
    ports = FakePorts(llm)
    ports.crash_at = 2  # finish_answer, record_call: the answer is stored with the RTC only

    with pytest.raises(Crash, match=r"^record_call$"):
        advance(ports)
    assert ports.checkpoint() is None and ports.rtcs == {}

    assert advance(ports) == WAITING

    assert len(llm.requests) == 2 and llm.requests[1] == HISTORY  # the same step, asked again
    assert list(ports.rtcs) == ["c1"]
    assert ports.checkpoint()["step"] == 1 and ports.checkpoint()["waiting_rtc"] == "rtc-1"
    ports.finish_rtc("c1", "A")
    assert advance(ports) == COMPLETED
    assert ports.results == {"c1": {"step": 1, "output": "A", "status": "done"}}


def test_crash_in_record_result_records_one_result_and_sends_it_once() -> None:
    llm = ScriptedModel([ToolCall("c1", "read", "{}"), Finish("tool_calls")],
                        [TextDelta("ok"), Finish("stop")])
    ports = FakePorts(llm)
    assert advance(ports) == WAITING
    ports.finish_rtc("c1", "A")
    ports.crash_at = ports.crashable_calls + 2  # rtc_outcome, record_result

    with pytest.raises(Crash, match=r"^record_result$"):
        advance(ports)

    assert advance(ports) == COMPLETED

    assert ports.log.count("record_result") == 2
    assert ports.results == {"c1": {"step": 1, "output": "A", "status": "done"}}
    assert list(ports.rtcs) == ["c1"]
    assert llm.requests[1] == [*HISTORY, assistant_calls(("c1", "read", "{}")),
                                         tool_result("c1", "A")]


def _scenario() -> FakePorts:
    llm = ScriptedModel(
        [TextDelta("First "), TextDelta("look."), ToolCall("c1", "read", '{"path": "/a"}'),
         ToolCall("c2", "clock", "{}"), Finish("tool_calls")],
        [ToolCall("c3", "write", '{"path": "/b"}'), Finish("tool_calls")],
        [TextDelta("Done."), Finish("stop")],
    )
    return FakePorts(llm, server_tools={"clock": lambda args: "12:00"})


BROWSER_OUTPUTS = {"c1": "content of a", "c3": "wrote b"}


def _run_until_finished(ports: FakePorts) -> list[str]:
    """Drive the turn like the worker and the browser: re-run after a crash, answer RTCs."""
    outcomes = []
    for _ in range(20):
        try:
            outcome = advance(ports)
        except Crash as crash:
            outcomes.append(f"crash in {crash}")
            continue
        outcomes.append(outcome)
        if outcome != WAITING:
            return outcomes
        for call_id, rtc in ports.rtcs.items():
            if rtc["id"] not in ports.outcomes:
                ports.finish_rtc(call_id, BROWSER_OUTPUTS[call_id])
    raise AssertionError(f"the turn never finished: {outcomes}")


def test_crash_at_any_port_call_repeats_at_most_the_last_step() -> None:
    clean = _scenario()
    assert _run_until_finished(clean) == [WAITING, WAITING, COMPLETED]
    expected_transcript = [
        assistant_calls(("c1", "read", '{"path": "/a"}'), ("c2", "clock", "{}"),
                        content="First look."),
        tool_result("c1", "content of a"), tool_result("c2", "12:00"),
        assistant_calls(("c3", "write", '{"path": "/b"}')), tool_result("c3", "wrote b"),
        {"role": "assistant", "content": "Done."},
    ]
    assert clean.completed[0].transcript == expected_transcript
    assert clean.crashable_calls > 20

    for point in range(1, clean.crashable_calls + 1):
        ports = _scenario()
        ports.crash_at = point

        outcomes = _run_until_finished(ports)

        where = f"crash point {point}: {outcomes}"
        assert len([o for o in outcomes if o.startswith("crash")]) == 1, where
        assert outcomes[-1] == COMPLETED, where
        assert [cp.transcript for cp in ports.completed] == [expected_transcript], where
        assert ports.llm.requests[-1] == HISTORY + expected_transcript[:-1], where
        assert {k: (r["id"], r["arguments"]) for k, r in ports.rtcs.items()} == {
            "c1": ("rtc-1", {"path": "/a"}), "c3": ("rtc-2", {"path": "/b"})}, where
        assert {k: r["output"] for k, r in ports.results.items()} == {
            "c1": "content of a", "c2": "12:00", "c3": "wrote b"}, where
        for call_id, call in ports.calls.items():  # one step number per call, in every port
            assert ports.results[call_id]["step"] == call["step"], where
            if call_id in ports.rtcs:
                assert ports.rtcs[call_id]["step"] == call["step"], where
        # A server tool runs at least once: twice only when the crash hit between the run and
        # the save that records its result.
        assert ports.server_runs in ([("clock", {})], [("clock", {})] * 2), where
        assert ports.cancelled == [] and ports.failed == [], where


def test_the_engine_imports_neither_django_nor_channels() -> None:
    tree = ast.parse(Path(engine.__file__).read_text(encoding="utf-8"))
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}

    assert modules == {"__future__", "orjson", "logging", "dataclasses", "typing",
                       "apps.turns.llm", "apps.turns.llm_errors", "rtcagent.errors",
                       "rtcagent.jsonsafety"}


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ('{"path": "/a\\u0000b"}', "contains a NUL character"),
        ('{"a": ' + "[" * 100 + "]" * 100 + "}", "deeper than 64 levels"),
        ("[" * 3000 + "]" * 3000, "not a JSON object"),
        ("[1]", "not a JSON object"),
    ],
)
def test_arguments_that_cannot_be_stored_become_an_error_for_the_model(raw, reason) -> None:
    from apps.turns.engine import _parse_arguments

    value, refused = _parse_arguments(raw)
    assert value is None
    assert refused.startswith("[Tool Error]") and reason in refused
