"""Django adapters for the engine's ports: messages, RTCs, Updates, checkpoints, stop signal.

Every write is one transaction that records its Update through ``publish_update``; every write
the engine may repeat after a crash is idempotent: messages the engine creates carry a
server-made ``client_id`` (``turn:<id>:<step>:<part>``) that is unique per user, and RTCs are
unique per (turn, tool call id).

The prompt of each call is built by ``apps.turns.context`` (layout, budgets, compaction); the
tools offered are the browser tools, the page's host functions and the server tools of
``apps.turns.server_tools``, which run here; each answer is accounted for by
``apps.turns.accounting.record_answer``, which also adds it to the turn's and session's totals.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import redis
from django.db import DataError, connection, transaction
from django.utils import timezone

from apps.gateway import stream
from apps.gateway.events import item, publish_live, publish_update
from apps.rtc import gate
from apps.rtc import tools as rtc_tools
from apps.rtc.models import TERMINAL_RTC_STATUSES, Rtc, RtcStatus
from apps.rtc.serializers import rtc_to_dict
from apps.sessions.models import ContentType, Message, MessageRole, Session, SessionStatus
from apps.sessions.serializers import (
    ErrorData,
    ToolCallInput,
    ToolCallOutput,
    message_to_dict,
    session_to_dict,
)
from apps.sessions.services import session_allocate_offsets
from apps.turns import accounting, queue, server_tools, state
from apps.turns.context import SYSTEM_PROMPT, Built, TurnContext, system_text
from apps.turns.conversation import conversation_for
from apps.turns.engine import Checkpoint, RtcOutcome
from apps.turns.llm import ChatModel, Event, Usage
from apps.turns.llm_errors import LLMError
from apps.turns.models import TERMINAL_TURN_STATUSES, TURN_TRANSITIONS, Turn, TurnStatus
from apps.turns.profiles import ModelProfile, profile_for
from apps.turns.serializers import turn_to_dict
from apps.turns.services import turn_transition
from rtcagent.conf import rtc_setting
from rtcagent.errors import InvalidState
from rtcagent.redis import get_redis
from rtcagent.returning import update_returning
from rtcagent.rows import Columns, batched, insert, later

log = logging.getLogger(__name__)

ERRORS_PER_HOUR = 20
__all__ = ["SYSTEM_PROMPT", "DjangoTurnPorts", "HoldLost", "conversation_for", "tools_for"]


_MESSAGE_IDS = uuid.UUID("0b9f6a52-54c4-4f55-9a43-1d8c2f3e7a10")  # namespace of ``message_id``


def message_id(client_id: str) -> uuid.UUID:
    """The id a message the engine creates gets: derived from its (per-user unique) server-made
    ``client_id``, so it is known before the row exists and the same when a step repeats."""
    return uuid.uuid5(_MESSAGE_IDS, client_id)


def _call_key(call_id: str) -> str:
    """A tool call id as used in message keys: short ids as is, long ones hashed."""
    if len(call_id) <= 64:
        return call_id
    return "h" + hashlib.sha256(call_id.encode()).hexdigest()[:40]


_RTC = Columns(Rtc, "r")
# seconds an early result stays expected after the wait for it ends (a submit in flight)
EARLY_MARGIN = 1.0
# seconds a run that went on with an early result waits for its commit before giving it up
EARLY_CONFIRM_WAIT = 10.0


def _rtc_row(rtc_id: str) -> Rtc | None:
    """The RTC, hand-written (``rtcagent.rows``): on every resume's path."""
    key = Rtc._meta.pk.get_db_prep_value(uuid.UUID(str(rtc_id)), connection)
    rows = _RTC.select("WHERE r.id = %s", [key])
    return rows[0] if rows else None


def _committed(woken: str | None, rtc_id: str) -> dict[str, Any] | None:
    """A commit's wake-up naming RTC ``rtc_id`` (``queue.wake_outcome``), decoded; None for
    any other wake-up."""
    if not woken or not woken.startswith("{"):
        return None
    try:
        data = json.loads(woken)
    except ValueError:
        return None
    return data if isinstance(data, dict) and data.get("rtc") == rtc_id else None


def result_client_id(call_msg: Message) -> str | None:
    """The client id of the ``toolcall_output`` message answering the turn's call message
    ``call_msg`` (``turn:<turn>:<step>:call:<call>`` -> ``...:result:<call>``, the key
    ``DjangoTurnPorts.record_result`` writes); None for a message that is no turn's call."""
    parts = call_msg.client_id.split(":", 4)
    if len(parts) != 5 or parts[0] != "turn" or parts[3] != "call":
        return None
    return ":".join((*parts[:3], "result", parts[4]))


def _output_content(call_id: str, name: str, arguments: str, output: str, status: str
                    ) -> dict[str, Any]:
    data = ToolCallOutput.make(id=call_id, tool_name=name, input=arguments, output=output,
                               status=status)
    return {"type": ContentType.TOOLCALL_OUTPUT, "data": data}


def write_result_message(rtc: Rtc, call_msg: Message, client_id: str,
                         output: str | None = None) -> Message:
    """Inside the transaction that finished ``rtc`` (``apps.rtc.services``), with
    ``rtc.output_message_id`` already ``message_id(client_id)``: the call's ``toolcall_output``
    message, as the turn's worker would write it (same key, content, parent and place in the
    turn), so that the worker that goes on with the turn writes nothing before the model is
    asked again (``DjangoTurnPorts.rtc_outcome``). ``call_msg`` is the RTC's call message, the
    latest of its turn while the RTC was open (at most one RTC of a turn is). ``output``: what
    the model is told, when the caller has it (a submit: from the result as the browser sent
    it, so that PostgreSQL's ``jsonb`` key order does not change the text an early offer of it
    carried); else from the row."""
    if output is None:
        output = rtc_tools.output_for_model(rtc.status, rtc.result, rtc.error_message)
    msg = result_message(rtc, call_msg, client_id, output=output,
                         global_offset=session_allocate_offsets(session_id=call_msg.session_id))
    insert(msg)
    return msg


def result_message(rtc: Rtc, call_msg: Message, client_id: str, *, output: str,
                   global_offset: int) -> Message:
    """The ``toolcall_output`` message of ``rtc`` (finished with ``rtc.status``), unsaved."""
    return Message(
        id=message_id(client_id),
        session_id=call_msg.session_id,
        user_id=rtc.user_id,
        client_id=client_id,
        global_offset=global_offset,
        turn_id=rtc.turn_id,
        turn_offset=call_msg.turn_offset + 1,
        role=MessageRole.TOOL,
        content=_output_content(rtc.tool_call_id, rtc.tool_name,
                                call_msg.content["data"]["input"], output, rtc.status),
        streaming_status="completed",
        parent_message=call_msg,
    )


def tools_for(session: Session) -> list[dict[str, Any]]:
    """The tools offered to the model, in a stable order (they lead the cached prefix): the
    browser tools, the page's host functions, then the server tools sorted by name. A host
    function named like a server tool is left out (the server tool would run instead)."""
    served = set(server_tools.names())
    hosts = [t for t in rtc_tools.host_schemas(session.host_functions)
             if t["function"]["name"] not in served]
    return rtc_tools.schemas() + hosts + server_tools.schemas()


def open_stream(llm: ChatModel, messages: list[dict[str, Any]],
                tools: list[dict[str, Any]] | None, should_cancel: Callable[[], bool] | None,
                on_open: Callable[[Callable[[], None] | None], None]) -> Iterator[Event]:
    """``llm.stream`` telling ``on_open`` how to abort the open response, when it can."""
    try:
        return llm.stream(messages, tools, should_cancel=should_cancel,
                          on_open=on_open)  # type: ignore[call-arg]
    except TypeError:  # a model without ``on_open``: the flag alone cuts its stream
        return llm.stream(messages, tools, should_cancel=should_cancel)


class WatchedModel:
    """The turn's model client, handing each open response's abort to the turn's watch."""

    def __init__(self, llm: ChatModel, watch: Any,
                 opened: Callable[[], None] | None = None) -> None:
        self.inner = llm
        self.watch = watch
        self.model = getattr(llm, "model", None)
        self.opened = opened  # called once a request is out (its response open)

    def stream(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *,
               should_cancel: Callable[[], bool] | None = None) -> Iterator[Event]:
        def on_open(abort: Callable[[], None] | None) -> None:
            self.watch.set_abort(abort)
            if abort is not None and self.opened is not None:
                self.opened()

        return open_stream(self.inner, messages, tools, should_cancel, on_open)


class TurnEnded(BaseException):
    """A resumed turn was stopped before its first write (``DjangoTurnPorts.begin``): the run
    ends there, its write rolled back. A BaseException for the same reason as ``HoldLost``."""


class EarlyResultVoid(BaseException):
    """The result this run went on with before its commit (``await_result``, an early offer)
    was not stored: the run ends before its first write, and the turn waits for its RTC as if
    the result had not come. A BaseException for the same reason as ``HoldLost``."""


class HoldLost(BaseException):
    """This worker no longer holds the turn's session (its lease ran out while it was stalled):
    another worker may be running the turn, so this one must stop writing at once. A
    BaseException, so that no ``except Exception`` on the way (LLM adapter, engine) turns it
    into a turn failure."""


@functools.cache
def _held_start_sql() -> str:
    """A pending turn's move to running that fails when the turn is not pending any more:
    ``1 / COUNT(*)`` of the rows it moved is a division by zero then, which aborts the
    transaction it is held in (``DjangoTurnPorts._held_start``). Parameters: status,
    started_at, updated_at, id, the status it moves from."""
    q = connection.ops.quote_name
    meta = Turn._meta
    status, started, updated = (q(meta.get_field(n).column)
                                for n in ("status", "started_at", "updated_at"))
    return (f"WITH moved AS (UPDATE {q(meta.db_table)} SET {status} = %s, "  # noqa: S608
            f"{started} = COALESCE({started}, %s), {updated} = %s "
            f"WHERE {q(meta.pk.column)} = %s AND {status} = %s RETURNING 1) "
            "SELECT 1 / COUNT(*) FROM moved")


class DjangoTurnPorts:
    """The engine's ports for one turn, backed by the ORM and Redis."""

    def __init__(
        self, turn: Turn, llm: ChatModel, lost: Callable[[], bool] = lambda: False,
        *, profile: ModelProfile | None = None, session: Session | None = None,
    ) -> None:
        self.turn = turn
        self.llm = llm
        self._lost = lost
        # ``session``: the row as the caller just read or wrote it (a turn's start has it)
        self.session = session or Session.objects.get(pk=turn.session_id)
        self.profile = profile or profile_for(getattr(llm, "model", None))
        self.context = TurnContext(
            session=self.session, turn=turn, llm=llm, profile=self.profile,
            should_cancel=self.should_cancel, on_summary_usage=self._summary_usage,
            before_write=self._confirm,
        )
        self._tools: list[dict[str, Any]] | None = None
        self._step = 0
        self._last_call_msg: Message | None = None
        self._unwritten_call: tuple[int, dict[str, Any]] | None = None  # see record_call
        self._result_written: str | None = None  # see rtc_outcome
        self._taken_resumes = False  # see drop_taken_resumes
        # an early result this run went on with, until its commit confirms it (``_confirm``)
        self._unconfirmed: dict[str, Any] | None = None
        self._void = False  # it was not: the run ends, writing only the move to waiting
        self._withdrawn: set[str] = set()  # offers withdrawn (a wake-up list is LIFO)
        self._rtc_calls: dict[str, tuple[Rtc, Message]] = {}  # RTCs made here, call messages
        self.early_results = False  # offered results may be taken before their commit
        self._preloaded: dict[str, Any] | None = None
        self._unbilled: Callable[[], None] | None = None  # see settle
        self._starting: str | None = None  # the status ``begin`` deferred the move from
        self._turn_offset: int | None = None  # the next message's turn_offset (see _new_message)
        self._fresh = False  # see began_here
        self._rtc_count = 0  # the turn's RTCs so far, when ``_fresh``
        self._gate_session: Session | None = None  # ``create_rtc``: read with the offset
        # ``await_result``: the worker's hold of the session and its stop event, and how long
        # (seconds) a result may be waited for in place; 0 (ports made outside a worker) never
        self.hold: Any = None
        self.stopping: threading.Event | None = None
        self.result_wait = 0.0
        self._made: dict[str, bool] = {}  # RTCs created by this run -> whether a person approves
        self.tid = str(turn.id)
        self.user_id = turn.user_id
        self._streams: dict[tuple[int, str], Message] = {}
        self._call_msgs: dict[tuple[int, str], Message | None] = {}
        self._texts: dict[tuple[int, str], list[str]] = {}
        self._seq = 0
        self._cancel_checked = 0.0
        self._cancel = False
        # A stop (``turn_stop``) or a live call's input fires this at once in the process
        # streaming the turn: the flag is read first, and the open response is aborted
        # (``apps.live.interrupts``); the Redis flag polled below is the fallback.
        from apps.live import interrupts

        self.watch = interrupts.watch(self.tid)
        self.llm = WatchedModel(  # type: ignore[assignment]
            llm, self.watch, opened=self._request_out)

    def _request_out(self) -> None:
        """A model request is out (its response open): while the model thinks, what need
        not come before it: the prompt's state for the next run, the queue's leftovers and
        the last answer's accounting (``settle``). Each is retried when the run ends
        (``after_run``). An early result is confirmed first (``_confirm``)."""
        self._confirm()
        self.after_run(quiet=True)
        self.settle(quiet=True)

    def after_run(self, *, quiet: bool = False) -> None:
        """The prompt's state for the session's next run (``TurnContext.write_state``) and the
        resume items of a result taken in place (``drop_taken_resumes``), if still to do: once
        a request is out, and when the run ends (``Worker._run_turn``) whatever happened.
        ``quiet``: a Redis failure is logged; what failed is retried at the run's end. Not
        once the hold is lost: the session's new holder writes its own."""
        if self._lost():
            return
        self.drop_taken_resumes()
        try:
            self.context.write_state()
        except Exception:
            if not quiet:
                raise
            log.warning("turn %s: storing its prompt state failed; retried when the run ends",
                        self.tid, exc_info=True)

    def close(self) -> None:
        """The worker is done with this run of the turn."""
        from apps.live import interrupts

        interrupts.unwatch(self.tid)

    # --- checkpoint, prompt, tools, stop -----------------------------------------------------

    def load(self) -> Checkpoint | None:
        """From Redis, or from PostgreSQL when Redis lost it (``state.checkpoint_load``); the
        worker's ``preload`` is used instead, once."""
        data, self._preloaded = self._preloaded, None
        if data is None:
            data = state.checkpoint_load(self.tid)
        return Checkpoint.from_json(data) if data else None

    def preload(self, data: dict[str, Any]) -> None:
        """The checkpoint the worker just read (to see whether the turn has one): the next
        ``load`` uses it rather than reading it again."""
        self._preloaded = data

    def _check_hold(self) -> None:
        if self._lost():
            raise HoldLost(self.tid)

    def save(self, cp: Checkpoint) -> None:
        """PostgreSQL, then Redis; ``state.CheckpointNotCached`` (the turn pauses, the sweeper
        resumes it) when Redis refuses its copy. A save before the run's first write (a server
        tool's answer, a retry after "context too long") is that write: the turn moves to
        running with it (``begin``), so a pending turn never has a checkpoint and its run
        reads none (``Worker._run_turn``)."""
        self._check_hold()
        self._confirm()
        self.context.discard_ahead()  # a step between the result and the next request
        data = cp.to_json()
        if self._starting is None:
            state.checkpoint_save(self.tid, data)
            return
        with transaction.atomic():
            state.checkpoint_store(self.tid, data)
            self._publish([], [], checkpointed=True)
        state.checkpoint_cache(self.tid, data)

    def history(self) -> list[dict[str, Any]]:
        """The stored conversation before the turn, as stored (no budget, no compaction)."""
        return [{"role": "system", "content": system_text(self.session, "")},
                *conversation_for(self.session, self.turn)]

    def prompt(self, cp: Checkpoint, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        """The next request (``apps.turns.context``): the conversation from the database,
        this turn's answers included, laid out for the cache and compacted as needed. The last
        answer's accounting waits until this request is out (``settle``)."""
        self._step = cp.step
        return self.context.build(cp, tools).messages

    def context_overflow(self, cp: Checkpoint) -> bool:
        return self.context.overflow(cp)

    def tools(self) -> list[dict[str, Any]]:
        """Read once per run of the turn, so every call of the run offers the same bytes."""
        if self._tools is None:
            self._tools = tools_for(self.session)
        return self._tools

    def should_cancel(self) -> bool:
        self._check_hold()  # polled between chunks: a lost hold stops the stream at once
        if self.watch.fired.is_set():
            self._cancel = True
        now = time.monotonic()
        if not self._cancel and now - self._cancel_checked >= 0.2:
            self._cancel_checked = now
            # a turn not started yet has no checkpoint to find in Redis (``save``): the flag
            # answers; a stop PostgreSQL recorded before the worker read the row was put back
            self._cancel = state.stop_requested(
                self.tid, started=self._starting != TurnStatus.PENDING)
        return self._cancel

    def began_here(self, *, messages: int) -> None:
        """This run created the turn, which has ``messages`` messages so far (its trigger): no
        earlier run wrote any of its messages or RTCs, so the look-ups that make a repeated step
        idempotent (a message or RTC an earlier run wrote, their counts) are skipped. Each key
        is written at most once in a run; a run that loses its hold ends at its next check."""
        self._fresh = True
        self._turn_offset = messages

    # --- messages ---------------------------------------------------------------------------

    def _message(
        self, key: str, role: str, content: dict[str, Any], *, streaming: str = "completed",
        answers: Message | None = None,
    ) -> Message:
        """Create the turn's message ``key`` once (publishing message.created).

        ``answers`` is the ``toolcall_input`` message a result belongs to: it becomes the
        parent, and its RTC (if the call became one) gets this message as ``output_message_id``
        in the same transaction and Update (``rtc`` updated), so a message that exists is
        linked."""
        with transaction.atomic():
            msg, items, data_list = self._new_message(
                key, role, content, streaming=streaming, answers=answers)
            self._publish(items, data_list)
            return msg

    def _new_message(
        self, key: str, role: str, content: dict[str, Any], *, streaming: str = "completed",
        answers: Message | None = None, gate_read: bool = False,
    ) -> tuple[Message, list[dict[str, Any]], list[dict[str, Any]]]:
        """``_message`` inside the caller's transaction, unpublished: the message and the
        Update items it makes (none when it already existed), for the caller to publish with
        its own. ``gate_read``: the offset's statement also reads the session as the RTC
        gate needs it (``gate.allocate_with_session``), kept in ``_gate_session``."""
        self._confirm()
        self.context.discard_ahead()  # a message the rows read ahead lack
        client_id = f"turn:{self.tid}:{key}"
        if not self._fresh:
            found = Message.objects.filter(user_id=self.user_id, client_id=client_id).first()
            if found is not None:
                return found, [], []
        if gate_read:
            offset, self._gate_session = gate.allocate_with_session(self.session.id)
        else:
            offset = session_allocate_offsets(session_id=self.session.id)
        if self._turn_offset is None:  # counted once per run: only this run adds to the turn
            self._turn_offset = Message.objects.filter(turn_id=self.turn.id).count()
        turn_offset = self._turn_offset
        # a write rolled back ends the run (TurnEnded, HoldLost, an error): the count never
        # outlives one
        self._turn_offset += 1
        msg = Message(
            id=message_id(client_id),
            session_id=self.session.id,
            user_id=self.user_id,
            client_id=client_id,
            global_offset=offset,
            turn_id=self.turn.id,
            turn_offset=turn_offset,
            role=role,
            content=content,
            streaming_status=streaming,
            parent_message=answers,
        )
        insert(msg)  # the ORM's create cost three times the statement to compile
        items, data_list = [item("message", "created", msg.id)], [message_to_dict(msg)]
        if answers is not None:
            rtc = self._link_output(answers, msg)
            if rtc is not None:
                items.append(item("rtc", "updated", rtc.id))
                data_list.append(rtc_to_dict(rtc))
        return msg, items, data_list

    def _link_output(self, call_msg: Message, msg: Message) -> Rtc | None:
        """The RTC made for ``call_msg``, now pointing at its output ``msg``."""
        linked = update_returning(Rtc.objects.filter(turn_id=self.turn.id, message=call_msg),
                                  output_message=msg, updated_at=timezone.now())
        # none: refused before it became an RTC (bad arguments, unknown tool)
        return linked[0] if linked else None

    def _update_message(self, msg: Message, **fields: Any) -> None:
        self._confirm()
        with transaction.atomic():
            for name, value in fields.items():
                setattr(msg, name, value)
            msg.save(update_fields=[*fields, "updated_at"])
            self._publish([item("message", "updated", msg.id)], [message_to_dict(msg)])

    def delta(self, step: int, kind: str, text: str) -> None:
        """Publish a chunk of answer ``step``. The first chunk of a stream goes out before its
        message is stored (then at once): its id is known in advance (``message_id``), and a
        client keeps chunks of a message it has not seen yet (docs/protocol.md §4.5)."""
        self._confirm()  # done when the request opened, for a model that says so
        msg = self._streams.get((step, kind))
        key = f"{step}:{kind}"
        self._texts.setdefault((step, kind), []).append(text)
        self._seq += 1
        publish_live(
            self.user_id,
            {
                "type": "chunk",
                "session_id": str(self.session.id),
                "turn_id": self.tid,
                "message_id": str(msg.id if msg is not None
                                  else message_id(f"turn:{self.tid}:{key}")),
                "kind": kind,
                "delta": text,
                "seq": self._seq,
            },
        )
        if msg is None:
            self._streams[(step, kind)] = self._message(
                key, MessageRole.ASSISTANT, {"type": kind, "data": ""}, streaming="streaming",
            )

    def finish_answer(
        self, step: int, text: str, reasoning: str, usage: Usage | None, *, cancelled: bool = False
    ) -> None:
        # A stopped answer keeps its partial text; it is marked failed (never "completed").
        status = "failed" if cancelled else "completed"
        answer: Message | None = None
        # Streamed by this process: kept; else maybe by a process that died mid-answer (its
        # messages must not stay "streaming"): both kinds looked up in one query.
        unseen = [f"turn:{self.tid}:{step}:{kind}" for kind in ("thinking", "markdown")
                  if (step, kind) not in self._streams and not self._fresh]
        earlier = {m.client_id: m for m in Message.objects.filter(
            user_id=self.user_id, client_id__in=unseen)} if unseen else {}
        for kind, body in (("thinking", reasoning), ("markdown", text)):
            self._texts.pop((step, kind), None)
            msg = self._streams.pop((step, kind), None)
            if msg is None:
                msg = earlier.get(f"turn:{self.tid}:{step}:{kind}")
            if msg is None and body:
                msg = self._message(
                    f"{step}:{kind}", MessageRole.ASSISTANT, {"type": kind, "data": body}
                )
            if msg is None:
                continue
            fields: dict[str, Any] = {
                "content": {"type": kind, "data": body},
                "streaming_status": status,
            }
            if kind == "markdown" and usage is not None:
                fields.update(
                    input_tokens=usage.prompt_tokens,
                    output_tokens=usage.completion_tokens,
                    total_tokens=usage.total_tokens,
                    cached_tokens=usage.cached_tokens,
                    reasoning_tokens=usage.reasoning_tokens,
                )
            if kind == "markdown":
                answer = msg
            self._update_message(msg, **fields)
        self.settle()  # an earlier answer whose request never opened (a model without
        # ``on_open``, a failed attempt): accounted first, in order
        built: Built | None = self.context.last
        bill = {
            "turn_id": self.turn.id, "session_id": self.session.id,
            "message_id": answer, "step": step,  # the row: accounting reads no copy
            "model": self.profile.name, "usage": usage,
            "prompt_estimate": built.tokens if built is not None else 0,
            "shared_prefix_ratio": built.shared_prefix_ratio if built is not None else None,
        }
        self._unbilled = lambda: accounting.record_answer(**bill)

    def settle(self, *, quiet: bool = False) -> None:
        """Account for the last answer (``accounting.record_answer``) if not done yet.

        ``finish_answer`` leaves it for later, so that neither a tool pause nor its resume
        waits for the bookkeeping: after a browser tool's call it is done once the next
        model request is out (``WatchedModel.opened``: while the model thinks, when the
        server's core is otherwise idle), or when the turn pauses, ends, runs a server tool,
        or compacts; the worker settles it after ``advance`` whatever happened (``quiet``: a
        failure is logged, not raised; the request-open hook is quiet too, so that a failed
        bookkeeping never retries or fails the model's answer)."""
        if self._unbilled is None:
            return
        self._confirm()
        bill, self._unbilled = self._unbilled, None
        if bill is None:
            return
        try:
            bill()
        except Exception:
            if not quiet:
                raise
            log.exception("accounting for an answer of turn %s failed", self.tid)

    def _summary_usage(self, usage: Usage) -> None:
        """A compaction's summary call inside this turn: billed, the context fields left alone
        (its prompt is not the conversation). After the answer before it, in their order."""
        self.settle()
        accounting.record_answer(
            turn_id=self.turn.id, session_id=self.session.id, message_id=None, step=self._step,
            model=self.profile.name, usage=usage, prompt_estimate=0, shared_prefix_ratio=None,
            updates_context=False,
        )

    # --- tools ------------------------------------------------------------------------------

    def is_server_tool(self, name: str) -> bool:
        return server_tools.get(name) is not None

    def run_server_tool(self, name: str, arguments: dict[str, Any]) -> str | server_tools.Deferred:
        """Run it in this worker (``apps.turns.server_tools``), for the call just recorded."""
        self.context.discard_ahead()  # it may change what the next request reads (the todos)
        self.settle()
        self._write_call()
        call_msg = self._last_call_msg
        ctx = server_tools.ToolContext(
            user_id=self.user_id, session_id=str(self.session.id), turn_id=self.tid,
            message_id=str(call_msg.id) if call_msg is not None else None,
        )
        return server_tools.run(name, ctx, arguments)

    def deferred_outcome(self, ref: str) -> RtcOutcome:
        """A deferred server-tool result: ``ref`` is a sync sub-agent's session."""
        from apps.tasks.subagents import deferred_outcome

        finished, text, status = deferred_outcome(ref)
        return RtcOutcome(finished, text, status or "done")

    def record_call(self, step: int, call: dict[str, Any]) -> None:
        """The ``toolcall_input`` message: api.yaml's ``ToolCall`` as the model issued it.

        Written when first needed: a browser tool's call in the transaction (and the Update)
        that creates its RTC, so the browser learns both at once; anything else (a server
        tool, a result, a pause) writes it first. A crash before then loses nothing: the
        checkpoint still names the call, and the repeated step records it again."""
        self._unwritten_call = (step, call)
        self._last_call_msg = None

    def _call_msg_key(self, step: int, call: dict[str, Any]) -> str:
        return f"{step}:call:{_call_key(call['id'])}"

    def _new_call_message(self, step: int, call: dict[str, Any], *, gate_read: bool = False,
                          ) -> tuple[Message | None, list[dict[str, Any]], list[dict[str, Any]]]:
        """Inside the caller's transaction: the recorded call's message, created now if it was
        not written yet (with its Update items), else as ``_call_message`` finds it.
        ``gate_read``: as ``_new_message``'s."""
        pending = self._unwritten_call
        if pending is None or pending[0] != step or pending[1]["id"] != call["id"]:
            return self._call_message(step, call), [], []
        data = ToolCallInput.make(id=call["id"], tool_name=call["name"], input=call["arguments"])
        msg, items, data_list = self._new_message(
            self._call_msg_key(step, call), MessageRole.ASSISTANT,
            {"type": ContentType.TOOLCALL_INPUT, "data": data}, gate_read=gate_read,
        )
        self._unwritten_call = None
        self._call_msgs[(step, call["id"])] = self._last_call_msg = msg
        return msg, items, data_list

    def _write_call(self) -> None:
        """Write the recorded call's message now, in a transaction of its own."""
        if self._unwritten_call is None:
            return
        step, call = self._unwritten_call
        with transaction.atomic():
            _, items, data_list = self._new_call_message(step, call)
            self._publish(items, data_list)

    def _call_message(self, step: int, call: dict[str, Any]) -> Message | None:
        """The call's ``toolcall_input`` message: kept from ``record_call``, or read back when
        this process resumed the turn after another recorded the call."""
        pending = self._unwritten_call
        if pending is not None and pending[0] == step and pending[1]["id"] == call["id"]:
            self._write_call()
        key = (step, call["id"])
        if key not in self._call_msgs:
            self._call_msgs[key] = Message.objects.filter(
                user_id=self.user_id, client_id=f"turn:{self.tid}:{self._call_msg_key(step, call)}",
            ).first()
        return self._call_msgs[key]

    def record_result(self, step: int, call: dict[str, Any], output: str, status: str) -> None:
        """The ``toolcall_output`` message: the same ``ToolCall`` with ``output`` (what the model
        sees) and ``status``; its parent is the ``toolcall_input`` message, and the call's RTC
        (if it had one) gets it as ``output_message_id``."""
        if self._result_written == call["id"]:  # with the RTC's result (``rtc_outcome``)
            self._result_written = None
            if self._turn_offset is not None:
                self._turn_offset += 1
            return
        call_msg = self._call_message(step, call)
        self._message(
            f"{step}:result:{_call_key(call['id'])}",
            MessageRole.TOOL,
            _output_content(call["id"], call["name"], call["arguments"], output, status),
            answers=call_msg,
        )

    def create_rtc(self, step: int, call: dict[str, Any], arguments: dict[str, Any],
                   cp: Checkpoint) -> str:
        """The call's RTC id; "" when another session of its sub-agent tree has an RTC open
        on the device (``apps.rtc.gate``): the turn waits and asks again when that one ends.

        One transaction and one Update for the call's message (if not written yet), its RTC
        and the checkpoint ``cp`` waiting on it (the answer and its calls): the pause costs one
        commit and one publication. Redis gets the checkpoint's copy after the commit, before
        this thread lets the session go (a resume is taken only then); its older copy is
        dropped before the commit (``state.invalidate_reserving``): sent before the
        transaction, with the Update's topic offset, and read after its first statement."""
        self._check_hold()
        self._confirm()
        self.drop_taken_resumes()  # the previous call's: not this one's, which do not exist yet
        # with the session's wake-up (``await_result``): a result can only come after the commit
        reservation = state.invalidate_reserving(
            self.tid, self.user_id,
            also=(self.hold.wake_key,) if self.hold is not None else ())
        try:
            saved = self._rtc_transaction(step, call, arguments, cp, reservation)
        except BaseException:
            stream.release(self.user_id, reservation)  # rolled back: not held behind it
            raise
        state.checkpoint_cache(self.tid, saved)
        return saved["waiting_rtc"]

    def _rtc_transaction(self, step: int, call: dict[str, Any], arguments: dict[str, Any],
                         cp: Checkpoint, reservation: stream.Reservation) -> dict[str, Any]:
        """``create_rtc``'s transaction; its Update takes ``reservation``'s offset (given back
        when the transaction has nothing to publish). The checkpoint saved."""
        self._gate_session = None
        try:
            return self._rtc_writes(step, call, arguments, cp, reservation)
        except DataError as exc:
            if not isinstance(exc.__cause__, psycopg.errors.DivisionByZero):
                raise
            self.turn = Turn.objects.get(pk=self.turn.id)  # stopped before the commit
            raise TurnEnded(self.tid) from None

    def _rtc_writes(self, step: int, call: dict[str, Any], arguments: dict[str, Any],
                    cp: Checkpoint, reservation: stream.Reservation) -> dict[str, Any]:
        with batched(), transaction.atomic():  # its inserts go with the next statement
            # One RTC per call message (this step's call): ids like "call_0" recur across the
            # answers of one turn, so the id alone would find an earlier call's RTC.
            input_msg, items, data_list = self._new_call_message(step, call, gate_read=True)
            rtc = None if self._fresh else Rtc.objects.filter(
                turn_id=self.turn.id, message=input_msg, tool_call_id=call["id"]).first()
            if rtc is None:
                # read with the message's offset when the message is written now
                session = self._gate_session or gate.rtc_session(self.session.id)
                if gate.admit(session, self.turn.id):
                    rtc = Rtc(
                        session_id=session.id,
                        turn_id=self.turn.id,
                        user_id=self.user_id,
                        tool_call_id=call["id"],
                        tool_name=call["name"],
                        parameters=arguments,
                        offset=(self._rtc_count if self._fresh
                                else Rtc.objects.filter(turn_id=self.turn.id).count()),
                        message=input_msg,
                        status=RtcStatus.PENDING,
                        needs_approval=rtc_tools.needs_approval(
                            call["name"], session.work_mode, klass=self._host_class(call["name"])
                        ),
                        deadline=timezone.now() + rtc_tools.deadline_for(call["name"]),
                    )
                    insert(rtc)
                    self._rtc_count += 1
                    self._made[str(rtc.id)] = rtc.needs_approval
                    self._rtc_calls[str(rtc.id)] = (rtc, input_msg)
                    items.append(item("rtc", "created", rtc.id))
                    data_list.append(rtc_to_dict(rtc))
            saved = {**cp.to_json(), "waiting_rtc": "" if rtc is None else str(rtc.id)}
            state.checkpoint_store(self.tid, saved)
            # the drop confirmed before the commit; its reply came during the statements above
            position = state.invalidated(self.tid, reservation)
            published = self._publish(items, data_list, checkpointed=True, position=position)
        if not published:
            stream.release(self.user_id, position)
        return saved

    def _host_class(self, name: str) -> str | None:
        return next((f["class"] for f in self.session.host_functions if f["name"] == name), None)

    def rtc_outcome(self, rtc_id: str) -> RtcOutcome:
        """The RTC's outcome. One that came with its ``toolcall_output`` message (the browser's
        result, written in its transaction: ``write_result_message``; or one an earlier run
        recorded) is not recorded again: ``record_result`` then writes nothing."""
        rtc = _rtc_row(rtc_id)
        if rtc is None:
            raise Rtc.DoesNotExist(rtc_id)
        finished = rtc.status in TERMINAL_RTC_STATUSES
        text = rtc_tools.output_for_model(rtc.status, rtc.result, rtc.error_message)
        if finished and rtc.output_message_id is not None:
            self._result_written = rtc.tool_call_id  # the engine records it next
        return RtcOutcome(finished, text, rtc.status)

    def await_result(self, rtc_id: str) -> RtcOutcome:
        """Wait up to ``result_wait`` seconds for the result of an RTC this run created, so that
        a quick browser tool continues the turn in place: no move to interrupted and back, no
        second claim of the session, no new ports reading the turn, its session and checkpoint
        again. Meanwhile the turn stays running and its session held (the lease is renewed as
        for any item). Not for a call a person must approve first, nor once the worker stops,
        the turn is stopped or the hold is lost. Returns the RTC's outcome, finished or not.

        The result's resume item (queued by ``rtc_submit_result`` after its commit) wakes this
        wait (``Hold.wait_for_wake``) and is then dropped: the turn goes on here. A crash while
        waiting or after is a crash mid-item: the item being run (the message or resume that
        began this run) is not acknowledged, and comes back to the next holder."""
        hold, budget = self.hold, self.result_wait
        if hold is None or budget <= 0 or self._made.get(rtc_id, True):
            return self.rtc_outcome(rtc_id)
        # No read first: the RTC was created pending, and its transaction was preceded by the
        # drop of the session's wake-up (``create_rtc``), so a result committed since has
        # pushed one. The RTC is read after each wake-up, and each quarter second (a wake-up
        # is lost with its enqueue when Redis fails it, the resume's own fallback).
        deadline = time.monotonic() + budget
        if self.early_results and rtc_id in self._rtc_calls:
            try:
                hold.expect_result(rtc_id, budget + EARLY_MARGIN)
            except redis.RedisError:  # the commit's wake-up still comes
                log.warning("turn %s: early results not expected", self.tid, exc_info=True)
        self.context.read_ahead()  # the next request's reads, while the tool runs
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or self.should_cancel() or (self.stopping and self.stopping.is_set()):
                self.context.discard_ahead()
                return self.rtc_outcome(rtc_id)
            woken = hold.wait_for_wake(min(left, 0.25))
            outcome = self._woken_outcome(rtc_id, woken)
            if outcome is None:  # read from the database: its message is not in hand
                self.context.discard_ahead()
                outcome = self.rtc_outcome(rtc_id)
            if outcome.finished:
                self._taken_resumes = True  # dropped once the next request is out
                return outcome
            if not woken:  # a slow tool: the answer is accounted now, while nothing else runs
                self.settle()

    def _woken_outcome(self, rtc_id: str, woken: str | None) -> RtcOutcome | None:
        """The outcome a wake-up carries (``queue.wake_outcome``: the RTC's as committed,
        pushed after the commit), when it is this RTC's; None to read it instead. An early
        offer (``queue.offer_result``) is taken, unconfirmed, when ``_take_offer`` accepts it."""
        if woken and woken.startswith(queue.EARLY_PREFIX):
            return self._take_offer(rtc_id, woken[len(queue.EARLY_PREFIX):])
        if woken and woken.startswith(queue.WITHDRAWN_PREFIX):  # may come before its offer
            self._withdrawn.add(woken[len(queue.WITHDRAWN_PREFIX):])
            return None
        data = _committed(woken, rtc_id)
        if data is None or data.get("status") not in TERMINAL_RTC_STATUSES:
            return None
        if not data.get("written") or not self._pending_result(rtc_id, data["status"],
                                                                data["text"]):
            return None  # read it (and record its message) as before
        return RtcOutcome(True, data["text"], data["status"])

    def _pending_result(self, rtc_id: str, status: str, text: str) -> bool:
        """The result's ``toolcall_output`` message, as its submit writes it, for the next
        prompt (``TurnContext.pending``: rows read ahead, or before its commit, lack it); and
        nothing for the engine to record. False for an RTC this run did not make."""
        made = self._rtc_calls.get(rtc_id)
        ref = result_client_id(made[1]) if made is not None else None
        if made is None or ref is None:
            return False
        rtc, call_msg = made
        rtc.status = status
        self.context.pending = [result_message(rtc, call_msg, ref, output=text,
                                               global_offset=call_msg.global_offset + 1)]
        self._result_written = rtc.tool_call_id
        return True

    def _take_offer(self, rtc_id: str, raw: str) -> RtcOutcome | None:
        """An early result of this RTC, from its owner (the user, and the device that runs
        the session's tools), to go on with before its commit: nothing is written or shown
        until ``_confirm``. Its ``toolcall_output`` message is the one the submit writes
        (``write_result_message``); until that commits, the prompt has it from memory
        (``TurnContext.pending``). None for anything else (read the RTC)."""
        try:
            offer = json.loads(raw)
        except ValueError:
            return None
        device = self.session.device_id
        if (offer.get("rtc") != rtc_id or offer.get("user") != self.user_id
                or offer.get("token") in self._withdrawn
                or offer.get("status") not in (RtcStatus.COMPLETED, RtcStatus.FAILED)
                or not isinstance(offer.get("text"), str)
                or (device and offer.get("device") and offer["device"] != device)
                or not self._pending_result(rtc_id, offer["status"], offer["text"])):
            return None
        self._unconfirmed = offer
        return RtcOutcome(True, offer["text"], offer["status"])

    def _confirm(self) -> None:
        """Before this run's next write (and once the request it made with it is out): wait
        for the commit of the early result it went on with (``_take_offer``). Its commit's
        wake-up names the same outcome: go on. The submit withdrew it, the RTC ended
        otherwise, or no commit within ``EARLY_CONFIRM_WAIT``: ``EarlyResultVoid``. A no-op
        without an unconfirmed result."""
        offer = self._unconfirmed
        if offer is None or self._void:
            return
        self._check_hold()
        hold = self.hold
        deadline = time.monotonic() + EARLY_CONFIRM_WAIT
        while True:
            left = deadline - time.monotonic()
            try:
                woken = (hold.wait_for_wake(min(0.25, max(0.01, left))) if hold is not None
                         else None)
            except redis.RedisError:  # the database tells instead, four times a second
                log.warning("turn %s: waiting for a commit's wake-up failed", self.tid,
                            exc_info=True)
                woken = None
                time.sleep(min(0.25, max(0.0, left)))
            verdict = self._verdict(offer, woken)
            if verdict is None and not (woken or "").startswith(queue.EARLY_PREFIX):
                # quiet, or a wake-up that says nothing of it (its commit's may have been
                # trimmed by a later one, or lost with Redis): the database tells
                verdict = self._stored_verdict(offer)
            if verdict is None and left <= 0:
                verdict = False
            if verdict is True:
                self._unconfirmed = None
                self.context.pending = []
                self._taken_resumes = True  # the commit queued a resume: dropped later
                return
            if verdict is False:
                self._void = True
                self._result_written = None
                self.context.pending = []
                log.info("turn %s: the early result of rtc %s was not stored; the turn waits",
                         self.tid, offer["rtc"])
                raise EarlyResultVoid(self.tid)

    @staticmethod
    def _verdict(offer: dict[str, Any], woken: str | None) -> bool | None:
        """What wake-up ``woken`` says of ``offer``: True (its commit, the same outcome),
        False (withdrawn, or the RTC ended with another outcome), None (nothing about it)."""
        if not woken:
            return None
        if woken.startswith(queue.WITHDRAWN_PREFIX):
            return False if woken[len(queue.WITHDRAWN_PREFIX):] == offer["token"] else None
        data = _committed(woken, offer["rtc"])
        if data is None:
            return None
        return (data.get("status") == offer["status"] and data.get("text") == offer["text"]
                and bool(data.get("written")))

    def _stored_verdict(self, offer: dict[str, Any]) -> bool | None:
        """``_verdict`` from the RTC's row and its result's message (what the model is told,
        as the submit wrote it): None while the RTC is unfinished."""
        rtc = _rtc_row(offer["rtc"])
        if rtc is None or rtc.status not in TERMINAL_RTC_STATUSES:
            return None if rtc is not None else False
        if rtc.status != offer["status"] or rtc.output_message_id is None:
            return False
        content = (Message.objects.filter(pk=rtc.output_message_id)
                   .values_list("content", flat=True).first())
        return bool(content) and content.get("data", {}).get("output") == offer["text"]

    def abandon_early_result(self) -> None:
        """After ``EarlyResultVoid``: the turn waits for its RTC (interrupted), as when no
        result came in time; the run's request, if out, was closed with the exception."""
        self.wait()

    def drop_taken_resumes(self) -> None:
        """The resume items of a result this run took in place (``await_result``), removed
        from the queue once the next request is out, or before the turn's next RTC is made, or
        when the run ends: not on the way from the result to the model. Until then the hold
        keeps every other worker from taking them; one left by a crash resumes a turn that
        finds its checkpoint ahead of it (a no-op run)."""
        if not self._taken_resumes or self.hold is None:
            return
        try:
            self.hold.drop_resumes(self.tid)
        except redis.RedisError:  # kept for the next try (a leftover only costs a no-op run)
            log.warning("turn %s: dropping its taken resume items failed", self.tid,
                        exc_info=True)
            return
        self._taken_resumes = False

    # --- lifecycle --------------------------------------------------------------------------

    def _turn_to(self, to: str, **values: Any) -> bool:
        """Move the turn to ``to``; False when it could not (ended meanwhile). A move to an end
        drops the checkpoint (``turn_transition``).

        Token totals are not among ``values``: ``accounting.record_answer`` adds each
        answer's usage to the turn and the session as it arrives."""
        self._confirm()
        with transaction.atomic():
            try:
                if self._starting and to not in TURN_TRANSITIONS[self._starting]:
                    # e.g. completed: by way of running, in one Update (an end drops the
                    # checkpoint: none to store first)
                    self._start(checkpointed=to in TERMINAL_TURN_STATUSES)
                self._starting = None
                turn = turn_transition(turn_id=self.turn.id, to=to, values=values or None)
            except InvalidState:
                self.turn = Turn.objects.get(pk=self.turn.id)
                return False
            publish_turn(turn)
            self.turn = turn
            return True

    def _ended(self, moved: bool) -> None:
        """After ``_turn_to`` an end: a turn that had ended otherwise (stopped meanwhile) may
        still have its checkpoint; the move dropped it otherwise."""
        if not moved:
            state.checkpoint_delete(self.tid)

    def begin(self) -> bool:
        """The turn runs (from pending or, on a resume, from interrupted); False if it ended.

        The turn moves to running with the first write of the run, in its transaction and
        Update (``_publish``), not in a commit of its own before the model request: a new turn
        (pending: created with its message, ``message_send``) with its first answer's first
        message, or its RTC, or its end; a resumed one (interrupted) with its result's message.
        If the turn ended meanwhile (stopped), that write raises ``TurnEnded``."""
        if self.turn.status == TurnStatus.RUNNING:
            return True
        if self.turn.status in (TurnStatus.PENDING, TurnStatus.INTERRUPTED):
            self._starting = self.turn.status
            if self._starting == TurnStatus.PENDING:
                # Its row was just read, not stopped. A stop from now on cancels the pending
                # row, which the run's first write finds (``TurnEnded``), so the stop flag's
                # first poll (``should_cancel``) can wait its interval: a Redis round trip less
                # before a new turn's first request, for at most a request the stop aborts.
                self._cancel_checked = time.monotonic()
            return True
        return False

    def _start(self, *, checkpointed: bool = False, held: bool = False
               ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Inside a transaction: the deferred move to running (``begin``), and its Update item
        (None when there was none to make). ``InvalidState`` when the turn ended. A new turn
        gets its first checkpoint here (the empty one, unless an earlier run saved one; not
        when the transaction stores or drops one itself: ``checkpointed``): from now on it is
        running, and a running turn without a checkpoint would be lost. Its session was made
        active with it (``message_send``). ``held``: a pending turn's move may go with the
        transaction's commit (``_held_start``)."""
        if self._starting is None:
            return None
        if held and self._starting == TurnStatus.PENDING and checkpointed:
            turn = self._held_start()
            if turn is not None:
                self.turn, self._starting = turn, None
                return item("turn", "updated", turn.id), turn_to_dict(turn)
        turn = turn_transition(turn_id=self.turn.id, to=TurnStatus.RUNNING)
        if self._starting == TurnStatus.PENDING and not checkpointed:
            state.checkpoint_store_first(self.tid, Checkpoint().to_json())
        self.turn, self._starting = turn, None
        return item("turn", "updated", turn.id), turn_to_dict(turn)

    def _held_start(self) -> Turn | None:
        """A pending turn's move to running sent with the transaction's next statement (at the
        latest its commit) instead of a round trip of its own; None where that cannot be
        (not a batched transaction on PostgreSQL). The turn as the move leaves it, made here:
        a pending turn has nothing else written since this run read it (its first answer is
        accounted after the next request). A turn no longer pending (stopped meanwhile)
        fails the statement, hence the transaction (a division by zero: ``_held_start_sql``),
        which ``_rtc_transaction`` turns into ``TurnEnded``."""
        if connection.vendor != "postgresql" or not getattr(connection, "batching", False):
            return None
        now = timezone.now()
        turn = copy.copy(self.turn)
        turn.status, turn.updated_at = TurnStatus.RUNNING, now
        turn.started_at = turn.started_at or now
        meta = Turn._meta
        prep = [meta.get_field(name).get_db_prep_save(value, connection) for name, value in (
            ("status", turn.status), ("started_at", turn.started_at), ("updated_at", now),
            ("id", turn.id), ("status", TurnStatus.PENDING))]
        later(_held_start_sql(), prep)
        return turn

    def _publish(self, items: list[dict[str, Any]], data_list: list[dict[str, Any]], *,
                 checkpointed: bool = False, position: stream.Position | None = None) -> bool:
        """Inside a transaction: publish the write's Update items, led by the turn's move to
        running if it is still to be made (``begin``; ``checkpointed``: the transaction stores
        the turn's checkpoint itself). ``position``: the topic offset reserved for the Update.
        Whether there was anything to publish."""
        try:
            started = self._start(checkpointed=checkpointed, held=position is not None)
        except InvalidState:
            self.turn = Turn.objects.get(pk=self.turn.id)
            raise TurnEnded(self.tid) from None
        if started is not None:
            items, data_list = [started[0], *items], [started[1], *data_list]
        if items:
            publish_update(user_id=self.user_id, items=items, data_list=data_list,
                           position=position)
        return bool(items)

    def wait(self) -> None:
        self.settle()
        self._write_call()
        if self.turn.status == TurnStatus.RUNNING:
            self._turn_to(TurnStatus.INTERRUPTED)

    def complete(self, cp: Checkpoint) -> None:
        self.settle()  # the turn's Update carries its totals
        done = self._turn_to(TurnStatus.COMPLETED)
        self._ended(done)
        if done:  # after commit: an active goal counts a round and queues its next message
            from apps.tasks.hooks import after_turn

            after_turn(self.turn)
            _subagent_turn_end(self.turn)

    def cancel(self, cp: Checkpoint) -> None:
        self.settle(quiet=True)
        self._write_call()
        close_open_rtcs(self.turn, reason="the turn was stopped")
        done = self._turn_to(TurnStatus.CANCELLED)
        if done:
            _subagent_turn_end(self.turn)
        self._ended(done)

    def fail(self, error: LLMError) -> None:
        self.settle(quiet=True)
        for key, msg in list(self._streams.items()):  # an answer cut by the error keeps its text
            self._update_message(
                msg,
                content={"type": key[1], "data": "".join(self._texts[key])},
                streaming_status="failed",
            )
        self._streams.clear()
        close_open_rtcs(self.turn, reason="the turn failed")
        done = self._turn_to(TurnStatus.FAILED, error_message=f"{error.category}: {error.title}")
        if done:
            add_error_message(self.turn, error)
            _subagent_turn_end(self.turn)
        self._ended(done)


def _subagent_turn_end(turn: Turn) -> None:
    """A sub-agent's turn gives it its result; an ended turn stops the children it waited on
    (``apps.tasks.subagents.on_turn_end``, which never raises)."""
    from apps.tasks.subagents import on_turn_end

    on_turn_end(turn)


def publish_turn(turn: Turn, *,
                 before: list[tuple[dict[str, Any], dict[str, Any]]] | None = None
                 ) -> Session | None:
    """Inside a transaction: align the session's status with the turn and publish both; the
    turn alone when the session did not change (running <-> interrupted: it stays active, so
    each tool pause and resume needs neither the session's row lock nor its snapshot).

    ``before``: ``(item, data)`` pairs that replace the turn's ``updated`` item at the head of
    the same Update (a turn just created: ``turn created`` and its trigger message). Returns
    the session's row as changed (None when it did not change)."""
    busy = turn.status in (TurnStatus.PENDING, TurnStatus.RUNNING, TurnStatus.INTERRUPTED)
    status = SessionStatus.ACTIVE if busy else SessionStatus.IDLE
    head = before or [(item("turn", "updated", turn.id), turn_to_dict(turn))]
    items, data_list = [i for i, _ in head], [d for _, d in head]
    # One statement changes and reads the row. It stays locked until commit: a concurrent
    # session.update waits, so its (newer) snapshot gets the later offset and clients never
    # end on an older session state.
    changed = update_returning(
        Session.objects.filter(pk=turn.session_id).exclude(
            status__in=[SessionStatus.CLOSED, status]),
        status=status, updated_at=timezone.now())
    session = changed[0] if changed else None
    if session is not None:
        items.append(item("session", "updated", session.id))
        data_list.append(session_to_dict(session))
    publish_update(user_id=turn.user_id, items=items, data_list=data_list)
    return session


def close_open_rtcs(turn: Turn, *, reason: str) -> None:
    """Finish the turn's unfinished RTCs (failed, with ``reason``) and publish them."""
    open_ids = list(
        Rtc.objects.filter(turn_id=turn.id)
        .exclude(status__in=TERMINAL_RTC_STATUSES)
        .values_list("id", flat=True)
    )
    from apps.rtc.services import rtc_transition

    for rtc_id in open_ids:
        with transaction.atomic():
            try:
                rtc = rtc_transition(
                    rtc_id=rtc_id, to=RtcStatus.FAILED, values={"error_message": reason}
                )
            except InvalidState:
                continue
            publish_update(
                user_id=turn.user_id,
                items=[item("rtc", "updated", rtc.id)],
                data_list=[rtc_to_dict(rtc)],
            )
            gate.wake_after_commit(turn.session_id)


def add_error_message(turn: Turn, error: LLMError) -> None:
    """Add the ``error`` message of a failed turn, at most 20 per session per hour."""
    r = get_redis()
    key = f"rtc:errors:{{{turn.session_id}}}:{int(time.time() // 3600)}"
    count = r.incr(key)
    r.expire(key, 3700)
    if count > ERRORS_PER_HOUR:
        log.warning("error message limit reached for session %s", turn.session_id)
        return
    data: dict[str, Any] = {
        "category": error.category,
        "title": error.title,
        "message": error.message,
        "retryable": error.retryable,
    }
    if rtc_setting("SHOW_RAW_ERRORS"):
        data["raw_error"] = error.raw_error
    data = ErrorData.make(**data)
    with transaction.atomic():
        offset = session_allocate_offsets(session_id=turn.session_id)
        msg = Message.objects.create(
            session_id=turn.session_id,
            user_id=turn.user_id,
            client_id=f"turn:{turn.id}:error",
            global_offset=offset,
            turn_id=turn.id,
            turn_offset=Message.objects.filter(turn_id=turn.id).count(),
            role=MessageRole.SYSTEM,
            content={"type": ContentType.ERROR, "data": data},
        )
        publish_update(
            user_id=turn.user_id,
            items=[item("message", "created", msg.id)],
            data_list=[message_to_dict(msg)],
        )
