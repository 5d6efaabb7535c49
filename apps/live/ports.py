"""The engine's ports for an rtchild's turns: interruptible, text out, a window for context.

``ports_for`` gives the worker these ports for a live call's session (``DjangoTurnPorts`` for
every other session). What differs from an ordinary turn:

* **Interruption.** The turn watches ``apps.live.interrupts``: an input fires the watch, which
  sets the flag ``should_cancel`` reads and aborts the open model response, so the stream ends
  within a chunk's processing, not at the next poll. A tool that runs is never cut: the flag is
  only read between steps, and a turn waiting on an RTC stays waiting (``waits_out_tools``: the
  worker does not turn the flag into a stop that fails the RTC); it is cancelled once the
  result is recorded. A streaming answer cut by an input sends the request of the input's turn
  ahead (``_Prefetch``): that turn uses it only when its own prompt is the same. Calls of the
  cut answer that had not started get an explicit cancelled
  result, so every call in the history has its result.
* **Text out.** Every text delta also goes to the call's output channel (``channel.output`` on
  ``live:u=<id>``), and each answer's end is announced (``channel.output.end``, with
  ``interrupted``). Thinking and tool calls are not spoken.
* **"One moment" first.** An answer that calls tools without having said anything says the
  hold line first (``before_tools``): the caller hears it before the tool runs, whatever the
  model did.
* **A window, not compaction.** The prompt is the call's system text and the most recent
  blocks of its conversation (``apps.turns.conversation``: a model answer with all its calls and
  results is one block, so a call is never separated from its result), within a message and a
  token budget. Older messages stay stored for ``rt_transcript``.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from apps.gateway.events import publish_live
from apps.sessions.models import Session
from apps.turns import conversation
from apps.turns.context import message_parts
from apps.turns.engine import Checkpoint, validate
from apps.turns.llm import Cancelled, ChatModel, Event
from apps.turns.models import Turn
from apps.turns.prompt import truncate_output
from apps.turns.runner import DjangoTurnPorts, WatchedModel, open_stream, tools_for
from apps.turns.tokens import count_text

from . import interrupts
from .models import LiveCall
from .services import live_setting

log = logging.getLogger(__name__)

LIVE_PROMPT = (
    "You are the voice of a live call: the caller speaks to you now, and what you write is "
    "spoken aloud to them as you write it. Answer in short, natural spoken sentences, in the "
    "caller's language; no Markdown, lists, code or emoji. The caller may talk over you: a new "
    "input cuts your answer, and you continue from what they just said. Before you call any "
    "tool, first say one short line such as \"One moment.\": while a tool runs you cannot hear "
    "the caller."
)
CANCELLED_RESULT = ("[Cancelled] The caller interrupted before this tool ran; it did not run. "
                    "Call it again if it is still needed.")
# the agent's own call tools and long-running work are not a call's business
NOT_IN_CALLS = frozenset({
    "rt_children", "rt_transcript", "subAgent", "listSubAgent", "getSubAgentMessage",
    "stopSubAgent", "goal", "completeGoal", "cancelGoal", "loop", "listLoop", "stopLoop",
    "todoWrite",
})


def hold_line() -> str:
    """What an rtchild says before a tool when the model said nothing (``RTC_LIVE_HOLD_LINE``)."""
    return str(live_setting("LIVE_HOLD_LINE")).strip() or "One moment."


def ports_for(turn: Turn, llm: ChatModel, lost: Callable[[], bool],
              session: Session | None = None) -> DjangoTurnPorts:
    """The ports of ``turn``: ``LivePorts`` when its session is a live call's. A call's turns
    start from its inputs, whose client ids (hence the turns') start ``live:``: any other turn
    costs no query here. ``session``: the turn's session row when the caller has it fresh."""
    if not (turn.client_id or "").startswith("live:"):
        return DjangoTurnPorts(turn, llm, lost, session=session)
    call = LiveCall.objects.filter(session_id=turn.session_id).first()
    if call is None:
        return DjangoTurnPorts(turn, llm, lost, session=session)
    return LivePorts(turn, llm, lost, call=call, session=session)


class _Prefetch:
    """The next turn's model request, sent as soon as an input cut the turn.

    When an input cuts a streaming answer, the turn that answers it would otherwise send its
    request only after the cut turn's bookkeeping and the new turn's set-up (several
    transactions). The cut turn predicts that request (its own prompt, the text heard so far,
    the input) and sends it at once from a thread that buffers the events; the next turn of the
    session in this process uses it only when the prompt it built from the database is exactly
    the predicted one (the same bytes the model would have been sent), else closes it. Unused,
    it is closed after ``PREFETCH_TTL`` seconds.
    """

    def __init__(self, llm: ChatModel, messages: list[dict[str, Any]],
                 tools: list[dict[str, Any]] | None, session_id: str = "") -> None:
        self.messages, self.tools = messages, tools
        self.session_id = session_id
        self.model = str(getattr(llm, "model", "") or "")
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._closed = threading.Event()
        self.opened = threading.Event()  # the response is open (or the request failed)
        self._abort: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._taken = False
        self._thread = threading.Thread(target=self._run, args=(llm,), daemon=True,
                                        name="live-prefetch")
        self._thread.start()
        self._timer = threading.Timer(PREFETCH_TTL, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _run(self, llm: ChatModel) -> None:
        try:
            for event in open_stream(llm, self.messages, self.tools, self._closed.is_set,
                               self._set_abort):
                self.events.put(("event", event))
            self.events.put(("end", None))
        except BaseException as exc:  # handed to the consumer, who raises it in its thread
            self.events.put(("error", exc))
        finally:
            self.opened.set()

    def _set_abort(self, abort: Callable[[], None] | None) -> None:
        with self._lock:
            self._abort = abort
        if abort is not None:
            self.opened.set()
            if self._closed.is_set():
                abort()

    def _expire(self) -> None:
        with self._lock:
            taken = self._taken
        if not taken:
            with _prefetch_lock:
                for key, fetch in list(_prefetched.items()):
                    if fetch is self:
                        del _prefetched[key]
            try:
                self.discard()
            finally:
                from django.db import connection

                connection.close()  # this timer thread's own connection

    def discard(self) -> None:
        """Close it unused, and bill what it cost: the provider counted the prompt (an
        estimate here: its stream was never read to its usage) and any output so far."""
        if self._closed.is_set():
            return
        self.close()
        from apps.turns import accounting
        from apps.turns.llm import Usage
        from apps.turns.models import LLMCall
        from apps.turns.tokens import count_messages

        try:
            prompt = count_messages(self.messages, self.tools)
            accounting.record_call(
                session_id=self.session_id, model=self.model,
                usage=Usage(prompt_tokens=prompt, completion_tokens=0, cached_tokens=0,
                            total_tokens=prompt),
                purpose=LLMCall.Purpose.PREFETCH)
        except Exception:
            log.exception("billing an unused live request of session %s failed",
                          self.session_id)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            abort = self._abort
        if abort is not None:
            abort()

    def consume(self, should_cancel: Callable[[], bool],
                on_open: Callable[[Callable[[], None] | None], None]) -> Iterator[Event]:
        """The buffered events, then the rest as they come; cut like any stream."""
        with self._lock:
            self._taken = True
        self._timer.cancel()
        on_open(self.close)
        try:
            while True:
                try:
                    kind, value = self.events.get(timeout=0.05)
                except queue.Empty:
                    if should_cancel():
                        raise Cancelled() from None
                    continue
                if kind == "end":
                    return
                if kind == "error":
                    raise value
                if should_cancel():
                    raise Cancelled()
                yield value
        finally:
            on_open(None)
            self.close()


PREFETCH_TTL = 10.0
PREFETCH_HEAD_START = 0.05
_prefetched: dict[str, _Prefetch] = {}
_prefetch_lock = threading.Lock()


def _put_prefetch(session_id: str, fetch: _Prefetch) -> None:
    with _prefetch_lock:
        old = _prefetched.pop(session_id, None)
        _prefetched[session_id] = fetch
    if old is not None:
        old.discard()


def _take_prefetch(session_id: str, messages: list[dict[str, Any]],
                   tools: list[dict[str, Any]] | None) -> _Prefetch | None:
    with _prefetch_lock:
        fetch = _prefetched.pop(session_id, None)
    if fetch is None:
        return None
    if fetch.messages == messages and fetch.tools == tools and not fetch._closed.is_set():
        return fetch
    fetch.discard()  # the conversation changed meanwhile (another input, a window shift)
    return None


class _Abortable(WatchedModel):
    """The turn's watched model client (``WatchedModel``), using the request an earlier cut
    sent ahead when it is exactly this one."""

    def __init__(self, llm: ChatModel, watch: interrupts.Watch, session_id: str) -> None:
        super().__init__(llm, watch)
        self._session_id = session_id

    def stream(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *,
               should_cancel: Callable[[], bool] | None = None) -> Iterator[Event]:
        fetch = _take_prefetch(self._session_id, messages, tools)
        if fetch is not None:
            return fetch.consume(should_cancel or (lambda: False), self.watch.set_abort)
        return super().stream(messages, tools, should_cancel=should_cancel)

    def prefetch(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
                 ) -> None:
        """Send the request now; return once it is out (at most ``PREFETCH_HEAD_START``
        seconds): the caller's bookkeeping would otherwise compete with it for the GIL."""
        fetch = _Prefetch(self.inner, messages, tools, self._session_id)
        _put_prefetch(self._session_id, fetch)
        fetch.opened.wait(PREFETCH_HEAD_START)


class LivePorts(DjangoTurnPorts):
    waits_out_tools = True  # the worker: a stop flag never fails this turn's running RTC

    def __init__(self, turn: Turn, llm: ChatModel, lost: Callable[[], bool] = lambda: False,
                 *, call: LiveCall, session: Session | None = None) -> None:
        super().__init__(turn, llm, lost, session=session)
        self.call = call
        self.llm = _Abortable(llm, self.watch, str(self.session.id))
        self._out_seq = 0
        self._blocks: list[list[dict[str, Any]]] | None = None  # of the last prompt built
        self._keep = 1  # blocks at the end the window always keeps: the turn's input on

    # --- the prompt: a window over the call's conversation -------------------------------------

    def system(self) -> str:
        text = LIVE_PROMPT
        if self.call.instruction:
            text += "\n\nThe agent that started this call asked you:\n" + self.call.instruction
        if self.session.agent_prompt:
            text += "\n\n" + self.session.agent_prompt
        return text

    def history(self) -> list[dict[str, Any]]:
        return [{"role": "system", "content": self.system()},
                *conversation.conversation_for(self.session, self.turn)]

    def prompt(self, cp: Checkpoint, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        self.settle()
        self._step = cp.step
        blocks = conversation.load(self.session, self.turn, turn_steps=cp.step).blocks
        budget = self.profile.tool_result_budget
        self._blocks = [[_cut(m, budget) for m in b.messages] for b in blocks]
        # the turn's own input always stays in: from the block of its trigger message on
        trigger = self.turn.trigger_message_id
        self._keep = next((len(blocks) - i for i, b in enumerate(blocks)
                           if trigger is not None and b.anchor == trigger), 1)
        return self._windowed(self._blocks)

    def _windowed(self, blocks: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
        kept = window(blocks, live_setting("LIVE_WINDOW_MESSAGES"),
                      live_setting("LIVE_WINDOW_TOKENS"), keep=self._keep)
        return [{"role": "system", "content": self.system()}, *kept]

    def is_server_tool(self, name: str) -> bool:
        """A call's tools only: a model naming one it was not offered is told it is unknown."""
        return name not in NOT_IN_CALLS and super().is_server_tool(name)

    def hung_up(self) -> bool:
        """The call was stopped or its session closed: its turn stops, even during a tool."""
        return not LiveCall.objects.filter(
            pk=self.call.pk, status="running", session__deleted_at__isnull=True,
        ).exclude(session__status="closed").exists()

    def context_overflow(self, cp: Checkpoint) -> bool:
        return False  # the window is the call's only context management

    def tools(self) -> list[dict[str, Any]]:
        if self._tools is None:
            self._tools = [t for t in tools_for(self.session)
                           if t["function"]["name"] not in NOT_IN_CALLS]
        return self._tools

    # --- text out ------------------------------------------------------------------------------

    def _out(self, data: dict[str, Any]) -> None:
        publish_live(self.user_id, {
            "channel": self.call.output_channel, "live_call_id": str(self.call.id),
            "session_id": str(self.session.id), "turn_id": self.tid, **data,
        })

    def delta(self, step: int, kind: str, text: str) -> None:
        super().delta(step, kind, text)
        if kind == "markdown" and text:
            self._out_seq += 1
            msg = self._streams[(step, kind)]
            self._out({"type": "channel.output", "message_id": str(msg.id), "delta": text,
                       "seq": self._out_seq})

    def finish_answer(self, step: int, text: str, reasoning: str, usage: Any, *,
                      cancelled: bool = False) -> None:
        if cancelled and self.watch.next_text and self._blocks is not None:
            self._send_ahead(text)
        streamed = self._streams.get((step, "markdown"))
        super().finish_answer(step, text, reasoning, usage, cancelled=cancelled)
        if text or cancelled:
            self._out({"type": "channel.output.end", "text": text, "interrupted": cancelled,
                       "message_id": str(streamed.id) if streamed is not None else None})

    def _send_ahead(self, heard: str) -> None:
        """Send the request of the turn the cutting input will start, now (``_Prefetch``):
        the conversation the cut prompt held, the text heard so far, then the input, as the
        next turn will build it from the database."""
        assert self._blocks is not None
        blocks = [*self._blocks]
        if heard:
            blocks.append([{"role": "assistant", "content": heard}])
        blocks.append([{"role": "user", "content": self.watch.next_text}])
        self._keep = 1  # the next turn's own input: the last block
        try:
            self.llm.prefetch(validate(self._windowed(blocks)), self.tools() or None)
        except Exception:  # the next turn sends its own request
            log.exception("sending a live call's next request ahead failed")

    def before_tools(self, step: int, text: str) -> str:
        if text.strip():
            return text
        line = hold_line()
        self.delta(step, "markdown", line)
        return line

    # --- a cut answer's calls ------------------------------------------------------------------

    def cancel(self, cp: Checkpoint) -> None:
        if cp.answer is not None and not cp.waiting_rtc:
            for call in cp.calls[len(cp.results):]:
                self.record_call(cp.step, call)
                self.record_result(cp.step, call, CANCELLED_RESULT, "cancelled")
        super().cancel(cp)


def window(blocks: list[list[dict[str, Any]]], max_messages: int, max_tokens: int, *,
           keep: int = 1) -> list[dict[str, Any]]:
    """The most recent whole blocks within ``max_messages`` and about ``max_tokens`` (the last
    ``keep`` blocks always, however large): blocks are never split, so neither is a call and
    its result."""
    kept: list[list[dict[str, Any]]] = []
    count = tokens = 0
    for block in reversed(blocks):
        size = sum(n for _, n in message_parts(block, None)[1:])
        if len(kept) >= keep and (count + len(block) > max_messages
                                  or tokens + size > max_tokens):
            break
        kept.append(block)
        count += len(block)
        tokens += size
    return [m for block in reversed(kept) for m in block]


def _cut(message: dict[str, Any], budget: int) -> dict[str, Any]:
    """A tool output within the tool-result budget (head and tail), as every prompt has it."""
    if message.get("role") != "tool" or not isinstance(message.get("content"), str):
        return message
    cut = truncate_output(message["content"], budget, count_text)
    return message if cut is message["content"] else {**message, "content": cut}
