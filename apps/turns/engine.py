"""The turn loop: plain Python behind small ports (no Django, no channels).

``advance(turn, ports)`` runs a turn as far as it can go from its checkpoint: LLM answers, server
tools, and browser tools, which become RTCs. It returns when the turn is finished (completed,
cancelled, failed) or waits on an RTC (``WAITING``: the worker moves on; the RTC's result enqueues
a resume that calls ``advance`` again).

Invariants:

* The checkpoint is saved before anyone outside the worker is told: an RTC is created in the
  same transaction that stores the checkpoint naming its tool call and marking it waiting on it
  (``ports.create_rtc(..., cp)``), so neither exists without the other. A crash anywhere repeats
  at most the last step, and every step is idempotent (the store creates an RTC once per tool
  call id and a message once per key). A step that such a repeat redoes from what is stored
  is not saved again on its own (an answer whose first call becomes an RTC is stored with the
  RTC; an RTC's result moving the pair into the transcript is stored with the next answer).
* The model is only sent complete pairs: an assistant message with tool calls enters the
  transcript together with the results of all its calls, so a call is never sent without its
  result, nor a result without its call. Every prompt passes ``validate`` right before it is
  sent, whatever built it: an orphan there is a bug, logged as an error and dropped.
* The prompt comes from ``ports.prompt(cp, tools)`` when the ports build it themselves (the
  Django ports: layout, budgets, compaction, ``apps.turns.context``), else it is
  ``history() + transcript``. When the provider answers "context too long" and the ports can
  shrink the prompt (``context_overflow``, whose state is in ``cp.context``), the answer is
  asked once more; otherwise the ``context`` error fails the turn.
* Tool calls of one answer run one at a time, in order; at most one RTC waits per turn. A
  result that comes back while the worker still has the turn (``await_result``) continues it
  in place; otherwise the turn waits (``ports.wait``) and a resume runs it again from the
  checkpoint. Either way the same steps follow, from the same stored state.
* A server tool may answer ``Deferred`` (a sync sub-agent): its result slot stays open
  (``cp.deferred``: call index -> ref) and the next calls run at once, so the sub-agents of
  one answer all start before the turn waits. Once every call has run, the turn waits,
  checkpointed like an RTC, until ``ports.deferred_outcome`` says every deferred call
  finished; then their results are recorded in call order and the pair enters the transcript.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from apps.turns.llm import Cancelled, ChatModel, ReasoningDelta, TextDelta, ToolCall, Usage
from apps.turns.llm_errors import LLMError
from rtcagent.errors import InvalidRequest
from rtcagent.jsonsafety import check_json

log = logging.getLogger(__name__)

WAITING, COMPLETED, CANCELLED, FAILED = "waiting", "completed", "cancelled", "failed"
MAX_STEPS = 50  # LLM answers per turn


@dataclass
class Checkpoint:
    """What survives a crash; JSON in Redis (TTL 24 h)."""

    step: int = 0  # number of LLM answers received in this turn
    transcript: list[dict[str, Any]] = field(default_factory=list)  # complete pairs only
    answer: dict[str, Any] | None = None  # the assistant message whose calls are being run
    calls: list[dict[str, Any]] = field(default_factory=list)  # its calls: {id, name, arguments}
    results: list[dict[str, Any]] = field(default_factory=list)  # tool messages done so far
    waiting_rtc: str = ""
    usage: dict[str, int] = field(default_factory=dict)
    # the prompt pipeline's state (reactive level, target, retried step): ``apps.turns.context``
    context: dict[str, Any] = field(default_factory=dict)
    # results still to come (call index as a string -> the ``Deferred`` ref): sync sub-agents
    deferred: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = self.__dict__.copy()
        for name in ("context", "deferred"):  # absent unless used: short turns' stay as they were
            if not data[name]:
                del data[name]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Checkpoint:
        return cls(**data)


@dataclass(frozen=True)
class Deferred:
    """A server tool's result that is not there yet (``apps.turns.server_tools``): ``ref``
    names what the turn waits on (for a sync sub-agent, the child session id); the ports'
    ``deferred_outcome(ref)`` says whether it finished, and with what text."""

    ref: str


@dataclass(frozen=True)
class RtcOutcome:
    finished: bool
    text: str  # what the model sees (protocol.md §6)
    status: str = "done"  # recorded on the toolcall_output message: the RTC's final status


class TurnPorts(Protocol):
    """Everything the loop needs from the outside world, for one turn."""

    llm: ChatModel

    def load(self) -> Checkpoint | None: ...
    def save(self, cp: Checkpoint) -> None: ...
    def history(self) -> list[dict[str, Any]]: ...  # system prompt + conversation so far
    # optional: ``prompt(cp, tools) -> messages`` and ``context_overflow(cp) -> bool``
    def tools(self) -> list[dict[str, Any]]: ...
    def should_cancel(self) -> bool: ...
    # streaming output of answer ``step``
    def delta(self, step: int, kind: str, text: str) -> None: ...
    def finish_answer(self, step: int, text: str, reasoning: str, usage: Usage | None,
                      *, cancelled: bool = False) -> None: ...
    # tools
    def is_server_tool(self, name: str) -> bool: ...
    def run_server_tool(self, name: str, arguments: dict[str, Any]) -> str | Deferred: ...
    # optional, for servers tools that answer ``Deferred``: ``deferred_outcome(ref) -> RtcOutcome``
    # optional: ``before_tools(step, text) -> text``, called when an answer ends with tool calls,
    # before they run; what it returns is the answer's text (a live call's "one moment" line)
    def record_call(self, step: int, call: dict[str, Any]) -> None: ...
    def record_result(self, step: int, call: dict[str, Any], output: str, status: str) -> None: ...
    # the call's RTC id ("" when the device is busy: the turn waits), committed together with
    # ``cp`` as it is with ``waiting_rtc`` set to that id
    def create_rtc(self, step: int, call: dict[str, Any], arguments: dict[str, Any],
                   cp: Checkpoint) -> str: ...
    def rtc_outcome(self, rtc_id: str) -> RtcOutcome: ...
    # optional: ``await_result(rtc_id) -> RtcOutcome``, called instead of ``rtc_outcome``: may
    # wait a while for the result, so that the turn continues in place rather than pausing
    # lifecycle
    def wait(self) -> None: ...  # the turn is interrupted, waiting on an RTC
    def complete(self, cp: Checkpoint) -> None: ...
    def cancel(self, cp: Checkpoint) -> None: ...
    def fail(self, error: LLMError) -> None: ...


# --- the validator ----------------------------------------------------------------------------


def violations(messages: list[dict[str, Any]]) -> list[str]:
    """The pairing problems of ``messages`` (empty when the prompt may be sent)."""
    return _repair(messages)[1]


def validate(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with every tool call answered and every result called: the one validator
    every prompt passes before it is sent.

    Unchanged (the same list) when nothing is wrong. Otherwise the orphans are dropped (a call
    without its result, a result without its call, a repeated result) and the problem is
    logged as an error: the engine, the stores and compaction all keep pairs whole, so an
    orphan here means one of them has a bug."""
    repaired, problems = _repair(messages)
    if not problems:
        return messages
    log.error("prompt invariant violated, repaired before sending (a bug): %s",
              "; ".join(problems))
    return repaired


def _repair(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    out: list[dict[str, Any]] = []
    problems: list[str] = []
    i = 0
    while i < len(messages):
        m = messages[i]
        if m.get("role") == "tool":
            problems.append(f"result {m.get('tool_call_id')!r} at {i} answers no call")
            i += 1
            continue
        calls = m.get("tool_calls") if m.get("role") == "assistant" else None
        if not calls:
            if m.get("role") == "assistant" and "tool_calls" in m:
                problems.append(f"assistant message at {i} has an empty tool_calls list")
                m = {k: v for k, v in m.items() if k != "tool_calls"}
            if m.get("role") == "assistant" and m.get("content") is None:
                problems.append(f"assistant message at {i} has neither content nor calls")
            else:
                out.append(m)
            i += 1
            continue
        j = i + 1
        while j < len(messages) and messages[j].get("role") == "tool":
            j += 1
        unique: list[dict[str, Any]] = []
        for call in calls:
            if any(c.get("id") == call.get("id") for c in unique):
                problems.append(f"call {call.get('id')!r} at {i} appears twice")
            else:
                unique.append(call)
        ids = [c.get("id") for c in unique]
        answered: dict[Any, int] = {}  # call id -> index of its result
        for k in range(i + 1, j):
            rid = messages[k].get("tool_call_id")
            if rid not in ids:
                problems.append(f"result {rid!r} at {k} answers no call of message {i}")
            elif rid in answered:
                problems.append(f"result {rid!r} at {k} repeats an answer")
            else:
                answered[rid] = k
        kept = [c for c in unique if c.get("id") in answered]
        missing = [cid for cid in ids if cid not in answered]
        if missing:
            problems.append(f"calls {missing!r} at {i} have no result")
        if kept:
            out.append(m if len(kept) == len(calls) else {**m, "tool_calls": kept})
            out.extend(messages[k] for k in sorted(answered.values()))
        elif m.get("content"):
            out.append({k: v for k, v in m.items() if k != "tool_calls"})
        i = j
    return out, problems


def _parse_arguments(raw: str) -> tuple[dict[str, Any] | None, str]:
    """The call's arguments, or the error the model is told instead.

    Arguments are stored (RTC parameters, the browser's frame), so they pass the same depth
    and NUL check as every input; orjson refuses absurd nesting without recursing.
    """
    try:
        value = orjson.loads(raw or "{}")
    except orjson.JSONDecodeError:
        return None, "[Tool Error] the arguments are not a JSON object"
    if not isinstance(value, dict):
        return None, "[Tool Error] the arguments are not a JSON object"
    try:
        check_json(value, what="arguments")
    except InvalidRequest as exc:
        return None, f"[Tool Error] the arguments were refused: {exc.message}"
    return value, ""


def _add_usage(cp: Checkpoint, usage: Usage | None) -> None:
    if usage is None:
        return
    for name in ("prompt_tokens", "completion_tokens", "cached_tokens", "total_tokens"):
        cp.usage[name] = cp.usage.get(name, 0) + getattr(usage, name)


def advance(ports: TurnPorts) -> str:
    """Run the turn until it finishes or waits on an RTC; return the outcome."""
    cp = ports.load() or Checkpoint()
    try:
        return _advance(ports, cp)
    except LLMError as err:
        ports.fail(err)
        return FAILED


def _advance(ports: TurnPorts, cp: Checkpoint) -> str:
    unsaved = False  # cp holds an answer not stored yet (``_answer``)
    while True:
        from_rtc = False
        if cp.waiting_rtc:
            outcome = getattr(ports, "await_result", ports.rtc_outcome)(cp.waiting_rtc)
            if not outcome.finished:
                ports.wait()
                return WAITING
            _finish_call(ports, cp, outcome.text, outcome.status)
            from_rtc = True
        if cp.answer is not None and len(cp.results) == len(cp.calls):
            if cp.deferred and not _collect_deferred(ports, cp):
                if ports.should_cancel():
                    ports.cancel(cp)
                    return CANCELLED
                ports.wait()
                return WAITING
            # every call has its result: the pair enters the transcript
            cp.transcript += [cp.answer, *cp.results]
            cp.answer, cp.calls, cp.results = None, [], []
            if not from_rtc:
                ports.save(cp)
            # else the stored checkpoint still waits on the finished RTC, whose result a
            # restart records again (idempotent) to reach this state: the next answer's save
            # stores it, one commit less before the model is asked
        if ports.should_cancel():  # also between tool calls: a stopped turn starts no new RTC
            ports.cancel(cp)
            return CANCELLED
        if cp.answer is not None:
            if not _run_next_call(ports, cp, unsaved):
                return WAITING
            unsaved = False
            continue
        if cp.step >= MAX_STEPS:
            raise LLMError(
                category="tool", title="Too many steps",
                message=f"The agent stopped after {MAX_STEPS} model answers in one turn.",
                retryable=False, raw_error="",
            )
        outcome = _answer(ports, cp)
        if outcome is not None:
            return outcome
        unsaved = True


def _prompt(ports: TurnPorts, cp: Checkpoint, tools: list[dict[str, Any]] | None
            ) -> list[dict[str, Any]]:
    build = getattr(ports, "prompt", None)
    messages = build(cp, tools) if build is not None else ports.history() + cp.transcript
    return validate(messages)


def _overflow(ports: TurnPorts, cp: Checkpoint) -> bool:
    """The provider found the prompt too long: can the ports shrink it for one more try?"""
    shrink = getattr(ports, "context_overflow", None)
    if shrink is None or not shrink(cp):
        return False
    ports.save(cp)  # the reactive level survives a restart
    return True


def _answer(ports: TurnPorts, cp: Checkpoint) -> str | None:
    """One LLM answer. Returns a final outcome, or None when tool calls are to run: ``cp``
    then holds the answer and its calls, not saved yet (``_run_next_call`` saves it, with the
    first call's RTC when that call becomes one)."""
    step = cp.step
    tools = ports.tools() or None
    while True:
        text, reasoning, calls, usage = [], [], [], None
        try:
            messages = _prompt(ports, cp, tools)
            for event in ports.llm.stream(messages, tools, should_cancel=ports.should_cancel):
                if isinstance(event, TextDelta):
                    text.append(event.text)
                    ports.delta(step, "markdown", event.text)
                elif isinstance(event, ReasoningDelta):
                    reasoning.append(event.text)
                    ports.delta(step, "thinking", event.text)
                elif isinstance(event, ToolCall):
                    calls.append({"id": event.id, "name": event.name,
                                  "arguments": event.arguments})
                elif isinstance(event, Usage):
                    usage = event
        except Cancelled:
            ports.finish_answer(step, "".join(text), "".join(reasoning), usage, cancelled=True)
            _add_usage(cp, usage)
            ports.cancel(cp)
            return CANCELLED
        except LLMError as err:
            if err.category == "context" and not text and not reasoning and _overflow(ports, cp):
                continue
            raise
        break
    full = "".join(text)
    before_tools = getattr(ports, "before_tools", None)
    if calls and before_tools is not None:  # a live call says "one moment" before any tool
        full = before_tools(step, full)
    ports.finish_answer(step, full, "".join(reasoning), usage)
    _add_usage(cp, usage)
    cp.step += 1
    if not calls:
        cp.transcript.append({"role": "assistant", "content": full})
        ports.complete(cp)
        return COMPLETED
    cp.answer = {
        "role": "assistant",
        "content": full or None,
        "tool_calls": [
            {"id": c["id"], "type": "function",
             "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls
        ],
    }
    cp.calls, cp.results = calls, []
    return None


def _finish_call(ports: TurnPorts, cp: Checkpoint, output: str, status: str) -> None:
    call = cp.calls[len(cp.results)]
    ports.record_result(cp.step, call, output, status)
    cp.results.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    cp.waiting_rtc = ""
    if len(cp.results) < len(cp.calls) or cp.deferred:
        ports.save(cp)
    # else the answer is complete: ``_advance`` moves the pair into the transcript and saves
    # that right away (one save, not two); a crash in between repeats this idempotent step


def _collect_deferred(ports: TurnPorts, cp: Checkpoint) -> bool:
    """Record the deferred results once all of them are in; False while one is still out."""
    outcomes: dict[int, RtcOutcome] = {}
    for index, ref in cp.deferred.items():
        outcome = ports.deferred_outcome(ref)  # type: ignore[attr-defined]
        if not outcome.finished:
            return False
        outcomes[int(index)] = outcome
    for index in sorted(outcomes):
        outcome = outcomes[index]
        ports.record_result(cp.step, cp.calls[index], outcome.text, outcome.status)
        cp.results[index] = {**cp.results[index], "content": outcome.text}
    cp.deferred = {}
    ports.save(cp)
    return True


def _run_next_call(ports: TurnPorts, cp: Checkpoint, unsaved: bool = False) -> bool:
    """Run the next tool call; False when the turn waits (the device is busy). A call that
    became an RTC leaves ``cp.waiting_rtc`` set, for ``_advance`` to collect or wait on.
    ``unsaved``: ``cp`` holds an answer not stored yet; it is stored before anything else
    happens, with the RTC when the call becomes one."""
    call = cp.calls[len(cp.results)]
    ports.record_call(cp.step, call)
    arguments, refused = _parse_arguments(call["arguments"])
    rtc_bound = (arguments is not None and not ports.is_server_tool(call["name"])
                 and call["name"] in {t["function"]["name"] for t in ports.tools()})
    if unsaved and not rtc_bound:
        ports.save(cp)
    if arguments is None:
        _finish_call(ports, cp, refused, "error")
        return True
    if ports.is_server_tool(call["name"]):
        try:
            output = ports.run_server_tool(call["name"], arguments)
        except Exception as exc:  # a server tool's failure is the model's to handle
            log.warning("server tool %s failed: %s", call["name"], exc)
            output = f"[Tool Error] {exc}"
        if isinstance(output, Deferred):  # its slot stays open; the next call runs at once
            cp.deferred[str(len(cp.results))] = output.ref
            cp.results.append({"role": "tool", "tool_call_id": call["id"], "content": ""})
            ports.save(cp)
            return True
        _finish_call(ports, cp, output, "done")
        return True
    if not rtc_bound:
        _finish_call(ports, cp, f"[Tool Error] unknown tool {call['name']!r}", "error")
        return True
    cp.waiting_rtc = ports.create_rtc(cp.step, call, arguments, cp)  # cp stored with it
    if not cp.waiting_rtc:  # the device is busy with another RTC of the tree: asked again later
        ports.wait()
        return False
    return True  # ``_advance`` collects its outcome (a repeated step may find it finished)


