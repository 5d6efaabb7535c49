"""Channels, live calls and their inputs: the use cases behind ``v1.channel.*`` and the
``rt_children`` / ``rt_transcript`` tools (``docs/live.md``).

Invariants:

* Everything is the caller's: channels are looked up by (user, name), calls through the
  caller's session; another user's is ``not found`` (RPC) or an unknown id (tools).
* An input is an interrupt, never a queue entry behind a running answer: the call's open turn
  is cancelled (a pending one here, a streaming one by its worker, at once through
  ``apps.live.interrupts``), then the input becomes the next turn. The one thing an input does
  not cut is a tool that is running: the worker cancels the turn when the tool's result is
  recorded (``apps.live.ports``), and the input's turn follows.
* A call stops once (one conditional UPDATE); its parent hears of it once: as the result of
  its own ``rt_children stop``, or as a hand-over message when the call ended otherwise (its
  channel was unregistered).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.gateway.events import item, publish_live, publish_update
from apps.sessions.models import ContentType, Message, MessageRole, Session, SessionStatus
from apps.sessions.selectors import session_get
from apps.sessions.serializers import message_to_dict, session_to_dict
from apps.sessions.services import session_allocate_offsets, session_notify
from rtcagent.conf import app_setting
from rtcagent.errors import InvalidRequest, InvalidState, NotFound, RateLimited
from rtcagent.redis import get_redis

from .models import NAME_MAX, Channel, Direction, LiveCall, LiveStatus

log = logging.getLogger(__name__)

NAME = re.compile(rf"^[A-Za-z0-9._:-]{{1,{NAME_MAX}}}$")
DEFAULTS: dict[str, Any] = {
    "LIVE_MAX_CHANNELS": 32,  # channels per user
    "LIVE_MAX_CALLS": 4,  # running calls per user
    "LIVE_INPUT_MAX_CHARS": 8000,
    "LIVE_INPUTS_PER_MINUTE": 120,  # per call
    "LIVE_WINDOW_MESSAGES": 40,  # the rtchild's prompt keeps at most this many recent messages
    "LIVE_WINDOW_TOKENS": 8000,  # ... and at most about this many tokens of them
    "LIVE_TRANSCRIPT_MAX_LIMIT": 100,
    "LIVE_INSTRUCTION_MAX_CHARS": 20000,
    "LIVE_HOLD_LINE": "One moment.",  # what an rtchild says before a tool if the model did not
}


def live_setting(name: str) -> Any:
    """``settings.RTCAGENT[name]``, else the environment's ``RTC_<name>``, else the default."""
    return app_setting(name, DEFAULTS)


class Refused(Exception):
    """A tool call refused; the model reads ``[Tool Error] <message>``."""


# --- channels ---------------------------------------------------------------------------------


def _check_name(name: str, what: str = "name") -> str:
    if not isinstance(name, str) or not NAME.match(name):
        raise InvalidRequest(f"{what}: 1-{NAME_MAX} characters of letters, digits and . _ : -")
    return name


def channel_get(*, user_id: int, name: str) -> Channel:
    found = Channel.objects.filter(user_id=user_id, name=name).first()
    if found is None:
        raise NotFound("channel", repr(name))
    return found


def channel_register(*, user_id: int, name: str, direction: str, realtime: bool,
                     session_id: uuid.UUID | str | None = None) -> Channel:
    """Register ``name`` for the user (again: idempotent, and it may be bound to another
    session). Changing the direction or realtime flag of a channel a running call uses is
    refused: that call would be left reading a channel that no longer carries it."""
    _check_name(name)
    if direction not in Direction.values:
        raise InvalidRequest("direction: must be 'in' or 'out'")
    session = session_get(user_id=user_id, session_id=session_id) if session_id else None
    with transaction.atomic():
        found = Channel.objects.select_for_update().filter(user_id=user_id, name=name).first()
        if found is None:
            if Channel.objects.filter(user_id=user_id).count() >= live_setting(
                    "LIVE_MAX_CHANNELS"):
                raise RateLimited(f"at most {live_setting('LIVE_MAX_CHANNELS')} channels per "
                                  "user; unregister one first")
            return Channel.objects.create(user_id=user_id, name=name, direction=direction,
                                          realtime=realtime, session=session)
        if (found.direction, found.realtime) != (direction, realtime):
            using = _calls_using(user_id, name).first()
            if using is not None:
                raise InvalidState(f"channel {name!r} is used by live call {using.id}; "
                                   "stop the call or unregister the channel first")
        found.direction, found.realtime, found.session = direction, realtime, session
        found.save(update_fields=["direction", "realtime", "session", "updated_at"])
        return found


def _calls_using(user_id: int, name: str) -> Any:
    from django.db.models import Q

    return LiveCall.objects.filter(Q(input_channel=name) | Q(output_channel=name),
                                   user_id=user_id, status=LiveStatus.RUNNING)


def channel_unregister(*, user_id: int, name: str) -> list[str]:
    """Remove the channel; the calls that used it stop (their parents get the hand-over)."""
    channel = channel_get(user_id=user_id, name=name)
    stopped = []
    for call in list(_calls_using(user_id, name)):
        if call_stop(call, reason=f"its channel {name!r} was unregistered", notify=True):
            stopped.append(str(call.id))
    channel.delete()
    return stopped


def channel_list(*, user_id: int) -> list[Channel]:
    return list(Channel.objects.filter(user_id=user_id).order_by("name"))


# --- creating a call (rt_children create) -----------------------------------------------------


def _usable(user_id: int, session: Session, name: str, role: str) -> Channel:
    """The channel ``name`` as the ``role`` side (inputch/outputch) of a call in ``session``;
    ``Refused`` with the design note's messages otherwise."""
    found = Channel.objects.filter(user_id=user_id, name=name).first()
    if found is None or (found.session_id is not None and found.session_id != session.id):
        raise Refused(f"unknown channel {name!r}: no channel of that name is registered for "
                      "this session (a plugin registers it with v1.channel.register)")
    want = Direction.IN if role == "inputch" else Direction.OUT
    if found.direction != want:
        other = "outputch" if role == "inputch" else "inputch"
        raise Refused(f"channel {name!r} is an {found.get_direction_display()} channel and "
                      f"cannot be the {role}; are inputch and outputch swapped? Pass the "
                      f"{found.get_direction_display()} channel as {other}")
    if not found.realtime:
        raise Refused(f"the channel cannot carry an rt stream: {name!r} is not declared "
                      "realtime (the plugin must register it with realtime: true)")
    return found


def call_create(*, user_id: int, session_id: str, turn_id: str,
                call_message_id: str | None, inputch: str, outputch: str,
                instruction: str = "", title: str = "") -> LiveCall:
    """Start the rtchild for this tool call (or find the one it started before a crash)."""
    if call_message_id:
        found = LiveCall.objects.filter(call_message_id=call_message_id).first()
        if found is not None:
            return found
    inputch, outputch = (inputch or "").strip(), (outputch or "").strip()
    if not inputch or not outputch:
        raise Refused("the channel cannot carry an rt stream: an rtchild needs a paired "
                      "inputch and outputch, both registered realtime; give both")
    if inputch == outputch:
        raise Refused("inputch and outputch must be two different channels")
    parent = Session.objects.filter(pk=session_id, user_id=user_id,
                                    deleted_at__isnull=True).first()
    if parent is None:
        raise Refused("this session is gone")
    if LiveCall.objects.filter(session_id=parent.id).exists():
        raise Refused("an rtchild cannot start live calls of its own")
    _usable(user_id, parent, inputch, "inputch")
    _usable(user_id, parent, outputch, "outputch")
    most = live_setting("LIVE_MAX_CALLS")
    if LiveCall.objects.filter(user_id=user_id, status=LiveStatus.RUNNING).count() >= most:
        raise Refused(f"at most {most} live calls may run at once; stop one first")
    for name in (inputch, outputch):
        using = _calls_using(user_id, name).first()
        if using is not None:
            raise Refused(f"channel {name!r} is already used by live call {using.id}; stop it "
                          "first (rt_children action stop)")
    title = (title or "").strip()[:255] or f"Live call on {inputch}"
    most_chars = live_setting("LIVE_INSTRUCTION_MAX_CHARS")
    if len(instruction or "") > most_chars:
        raise Refused(f"instruction: at most {most_chars} characters")
    call_message = (Message.objects.filter(pk=call_message_id).first()
                    if call_message_id else None)
    try:
        with transaction.atomic():
            child = Session.objects.create(
                user_id=user_id, title=title, status=SessionStatus.IDLE,
                work_mode=parent.work_mode, device_id=parent.device_id,
                agent_prompt=parent.agent_prompt, host_functions=parent.host_functions,
                parent_session=parent, root_session_id=parent.root_session_id or parent.id,
                sub_agent_parent_message=call_message,
            )
            call = LiveCall.objects.create(
                user_id=user_id, parent_session=parent, session=child,
                call_message=call_message, title=title, instruction=instruction or "",
                input_channel=inputch, output_channel=outputch,
            )
            child = Session.objects.select_related("parent_session", "root_session").get(
                pk=child.pk)
            publish_update(user_id=user_id, items=[item("session", "created", child.id)],
                           data_list=[session_to_dict(child)])
            transaction.on_commit(lambda: publish_live(user_id, call_event(call)))
            return call
    except IntegrityError:  # this very step ran before a crash, or a channel was taken meanwhile
        found = (LiveCall.objects.filter(call_message_id=call_message_id).first()
                 if call_message_id else None)
        if found is None:
            raise Refused("a channel of this pair was taken by another live call meanwhile; "
                          "list the calls and try again") from None
        return found


def call_event(call: LiveCall) -> dict[str, Any]:
    """The ``live.call`` publication: a plugin learns its channels are connected, or not."""
    return {
        "type": "live.call", "live_call_id": str(call.id), "status": call.status,
        "input_channel": call.input_channel, "output_channel": call.output_channel,
        "session_id": str(call.session_id), "parent_session_id": str(call.parent_session_id),
        "title": call.title,
    }


# --- inputs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Delivered:
    delivered: bool
    live_call_id: str | None = None
    message_id: str | None = None
    interrupted: bool = False


def channel_input(*, user_id: int, name: str, text: str, client_id: str = "") -> Delivered:
    """Feed ``text`` into the call reading channel ``name``: it interrupts whatever the call
    is saying and becomes its next turn. Not delivered (nothing stored) when no running call
    reads the channel."""
    from apps.turns import state
    from apps.turns.models import ACTIVE_TURN_STATUSES, Turn, TurnStatus
    from apps.turns.queue import enqueue_message, enqueue_resume
    from apps.turns.runner import publish_turn
    from apps.turns.services import turn_transition

    from . import interrupts

    _check_name(name)
    text = text if isinstance(text, str) else ""
    if not text.strip():
        raise InvalidRequest("text: must not be blank")
    most = live_setting("LIVE_INPUT_MAX_CHARS")
    if len(text) > most:
        raise InvalidRequest(f"text: at most {most} characters")
    if len(client_id) > 64:  # "live:<call id>:<client_id>" fits a client id (128)
        raise InvalidRequest("client_id: at most 64 characters")
    # The hot path (a call reads the channel) costs two queries and two Redis round trips
    # before the running turn is cut; everything else is checked after.
    call = (LiveCall.objects.filter(user_id=user_id, input_channel=name,
                                    status=LiveStatus.RUNNING, session__deleted_at__isnull=True)
            .exclude(session__status=SessionStatus.CLOSED).first())
    if call is None:
        return _not_delivered(user_id, name)
    _rate(call)
    cid = f"live:{call.id}:{client_id or uuid.uuid4().hex}"
    if client_id:
        earlier = Message.objects.filter(user_id=user_id, client_id=cid).first()
        if earlier is not None:  # the same input again (a retried RPC): delivered once
            return Delivered(True, str(call.id), str(earlier.id), False)
    # A streaming turn is cut first, before any of the bookkeeping below: its worker drops the
    # stream (and may send this input to the model ahead of the next turn) while this commits.
    early = (Turn.objects.filter(session_id=call.session_id, status=TurnStatus.RUNNING)
             .values_list("id", flat=True).first())
    if early is not None:
        state.raise_stop_flag(str(early))
        interrupts.interrupt(str(early), text)
    interrupted_turn: str | None = None
    signal: str | None = None
    resume: Any = None
    with transaction.atomic():
        # the call's row lock orders this input with the worker starting a turn
        # (``input_skipped``) and with ``call_stop``
        call = LiveCall.objects.select_for_update().get(pk=call.pk)
        if call.status != LiveStatus.RUNNING:
            return Delivered(False)  # stopped meanwhile: nothing stored, nothing cut
        found = Message.objects.filter(user_id=user_id, client_id=cid).first()
        if found is not None:  # a concurrent retry got here first: it cut and queued
            return Delivered(True, str(call.id), str(found.id), False)
        turn = (Turn.objects.filter(session_id=call.session_id, status__in=ACTIVE_TURN_STATUSES)
                .order_by("created_at").first())
        if turn is not None:
            interrupted_turn = str(turn.id)
            state.request_stop(str(turn.id))
            if turn.status == TurnStatus.PENDING:
                try:  # not started: cancelled here (a worker starting it now sees the flag)
                    turn = turn_transition(turn_id=turn.id, to=TurnStatus.CANCELLED,
                                           only_from=(TurnStatus.PENDING,))
                    publish_turn(turn)
                except InvalidState:
                    signal = str(turn.id)
            elif turn.status == TurnStatus.INTERRUPTED and not _open_rtc(turn.id):
                # waiting for the device, no tool running: its worker cancels it at once
                resume = turn.id
            else:
                signal = str(turn.id)
        offset = session_allocate_offsets(session_id=call.session_id)
        msg = Message.objects.create(
            session_id=call.session_id, user_id=user_id, client_id=cid,
            global_offset=offset, role=MessageRole.USER,
            content={"type": ContentType.USER_MESSAGE,
                     "data": {"text": text, "origin": {
                         "kind": "live", "id": str(call.id), "channel": name}}},
        )
        LiveCall.objects.filter(pk=call.pk).update(
            inputs=call.inputs + 1,
            interruptions=call.interruptions + (1 if interrupted_turn else 0))
        publish_update(user_id=user_id, items=[item("message", "created", msg.id)],
                       data_list=[message_to_dict(msg)])
        session_id = call.session_id
        # the input is queued first, then the worker told: when the cut turn ends, the
        # worker holding the session takes this input next, without a round through the queue
        transaction.on_commit(lambda: enqueue_message(session_id, msg.id, user_id=user_id),
                              robust=True)
        if resume is not None:
            transaction.on_commit(lambda: enqueue_resume(session_id, resume, user_id=user_id),
                                  robust=True)
        if signal is not None and signal != str(early):
            transaction.on_commit(lambda: interrupts.interrupt(signal), robust=True)
    if interrupted_turn is not None:
        publish_live(user_id, {
            "type": "channel.interrupt", "channel": call.output_channel, "input_channel": name,
            "live_call_id": str(call.id), "session_id": str(call.session_id),
            "turn_id": interrupted_turn,
        })
    return Delivered(True, str(call.id), str(msg.id), interrupted_turn is not None)


def _not_delivered(user_id: int, name: str) -> Delivered:
    """No running call reads ``name``: the channel's errors, and a call whose session was
    stopped or deleted another way (a stopped tree, the user) stops now."""
    channel = channel_get(user_id=user_id, name=name)
    if channel.direction != Direction.IN:
        raise InvalidRequest(f"channel {name!r} is an output channel; input goes to an input "
                             "channel")
    orphan = LiveCall.objects.filter(user_id=user_id, input_channel=name,
                                     status=LiveStatus.RUNNING).first()
    if orphan is not None:
        call_stop(orphan, reason="its session was closed", notify=True)
    return Delivered(False)


def _open_rtc(turn_id: Any) -> bool:
    from apps.rtc.models import TERMINAL_RTC_STATUSES, Rtc

    return Rtc.objects.filter(turn_id=turn_id).exclude(status__in=TERMINAL_RTC_STATUSES).exists()


def input_skipped(msg: Message) -> bool:
    """Whether a call's input gets no turn: its call stopped (or its session closed), or a
    newer input of the call followed before its turn began (it stays in the conversation, the
    caller said it, and the newer input's turn, which takes it in, answers both).

    Inside the worker's transaction that would create the turn: the call's row lock orders
    this check with ``channel_input`` and ``call_stop`` (which take it too), so an input either
    sees the turn (and interrupts it) or is seen here, and no turn starts after a stop."""
    call = LiveCall.objects.select_for_update().filter(session_id=msg.session_id).first()
    if call is None:  # not a call's session (a parent's hand-over message)
        return False
    if call.status != LiveStatus.RUNNING:
        return True
    if not Session.objects.filter(pk=msg.session_id, deleted_at__isnull=True).exclude(
            status=SessionStatus.CLOSED).exists():
        return True
    return Message.objects.filter(
        session_id=msg.session_id, role=MessageRole.USER, turn__isnull=True,
        global_offset__gt=msg.global_offset, client_id__startswith="live:").exists()


def take_in_earlier_inputs(msg: Message, turn: Any) -> None:
    """The inputs this turn's input superseded become part of its turn (they are in its
    prompt anyway), so no sweep ever takes them for messages whose turn was lost."""
    Message.objects.filter(
        session_id=msg.session_id, role=MessageRole.USER, turn__isnull=True,
        global_offset__lt=msg.global_offset, client_id__startswith="live:").update(turn=turn)


def _rate(call: LiveCall) -> None:
    most = live_setting("LIVE_INPUTS_PER_MINUTE")
    key = f"rtc:live:{{{call.user_id}}}:rate:{call.id}:{int(time.time() // 60)}"
    r = get_redis()
    with r.pipeline(transaction=False) as pipe:
        count, _ = pipe.incr(key).expire(key, 90).execute()
    if count > most:
        raise RateLimited(f"at most {most} inputs a minute per live call",
                          details={"retry_after": 60 - int(time.time() % 60),
                                   "limit": "live_inputs_per_minute", "max": most})


# --- listing, stopping, the transcript --------------------------------------------------------


def _turn_state(call: LiveCall) -> tuple[str, int]:
    from apps.turns.models import Turn, TurnStatus

    turns = list(Turn.objects.filter(session_id=call.session_id).values_list("status", flat=True))
    if call.status == LiveStatus.STOPPED:
        return "stopped", len(turns)
    if TurnStatus.INTERRUPTED in turns:
        return "tool", len(turns)
    if TurnStatus.RUNNING in turns or TurnStatus.PENDING in turns:
        return "answering", len(turns)
    return "idle", len(turns)


def call_list(*, user_id: int, session_id: str) -> list[dict[str, Any]]:
    """The calls this session's agent created, newest first, with their state and turns."""
    out = []
    for call in LiveCall.objects.filter(user_id=user_id, parent_session_id=session_id
                                        ).order_by("-created_at")[:50]:
        state, turns = _turn_state(call)
        out.append({
            "id": str(call.id), "title": call.title, "status": call.status, "state": state,
            "turns": turns, "inputs": call.inputs, "interruptions": call.interruptions,
            "inputch": call.input_channel, "outputch": call.output_channel,
            "messages": _transcript_rows(call).count(),
            "created_at": call.created_at.isoformat(),
            **({"stop_reason": call.stop_reason} if call.stop_reason else {}),
        })
    return out


def call_for(*, user_id: int, session_id: str, call_id: str) -> LiveCall:
    """A call this session's agent created; ``Refused`` for anything else."""
    try:
        pk = uuid.UUID(str(call_id))
    except ValueError:
        raise Refused(f"unknown live call {call_id!r}") from None
    found = LiveCall.objects.filter(pk=pk, user_id=user_id, parent_session_id=session_id).first()
    if found is None:
        raise Refused(f"unknown live call {call_id!r}: rt_children action list shows this "
                      "session's calls")
    return found


def call_stop(call: LiveCall, *, reason: str, notify: bool) -> bool:
    """Stop the call once (False if it had stopped): its open turn is stopped, its session
    closed, the plugin told (``live.call`` stopped); ``notify``: the parent gets the hand-over
    as a message (when the parent did not stop it itself)."""
    from apps.turns.services import turn_stop

    from . import interrupts

    with transaction.atomic():
        # under the row lock: an input or a turn start either sees the call stopped or was
        # seen by this stop (``channel_input``, ``input_skipped``)
        locked = LiveCall.objects.select_for_update().filter(pk=call.pk).first()
        if locked is None or locked.status != LiveStatus.RUNNING:
            return False
        LiveCall.objects.filter(pk=call.pk).update(
            status=LiveStatus.STOPPED, stop_reason=reason[:255], stopped_at=timezone.now())
        call.refresh_from_db()
        Session.objects.filter(pk=call.session_id).exclude(status=SessionStatus.CLOSED).update(
            status=SessionStatus.CLOSED, closed_at=timezone.now(), updated_at=timezone.now())
        child = Session.objects.select_related("parent_session", "root_session").get(
            pk=call.session_id)
        publish_update(user_id=call.user_id, items=[item("session", "updated", child.id)],
                       data_list=[session_to_dict(child)])
        event = call_event(call)
        transaction.on_commit(lambda: publish_live(call.user_id, event))
        if notify:
            _tell_parent(call)
    turn = turn_stop(user_id=call.user_id, session_id=call.session_id)
    if turn is not None:
        interrupts.interrupt(str(turn.id))
    return True


def _transcript_rows(call: LiveCall) -> Any:
    return Message.objects.filter(session_id=call.session_id, deleted_at__isnull=True,
                                  ).exclude(content__type=ContentType.THINKING)


def handover_text(call: LiveCall) -> str:
    """What the parent is told when the call ends: how much there is, and how to read it."""
    count = _transcript_rows(call).count()
    head = f'Live call "{call.title}" (id: {call.id}) ended ({call.stop_reason or "stopped"}).'
    if count == 0:
        return (f"{head} This call has no context to hand over: the rtchild produced no "
                "messages. Do not call rt_transcript for it.")
    return (f"{head} Its transcript holds {count} messages; they are not in your context. "
            f'Page through it with rt_transcript(id="{call.id}", offset, limit) and keep only '
            "what you need.")


def _tell_parent(call: LiveCall) -> None:
    session_notify(
        session_id=call.parent_session_id, user_id=call.user_id,
        client_id=f"live:{call.id}:ended", text=handover_text(call),
        origin={"kind": "live", "id": str(call.id), "title": call.title,
                "status": call.status})


def transcript(call: LiveCall, *, offset: int, limit: int) -> str:
    """A page of the call's stored messages, oldest first: ``[n] role: text`` lines."""
    most = live_setting("LIVE_TRANSCRIPT_MAX_LIMIT")
    offset, limit = max(0, offset), max(1, min(limit, most))
    rows = _transcript_rows(call).order_by("global_offset")
    total = rows.count()
    if total == 0:
        return f"Live call {call.id} has no messages."
    page = list(rows[offset:offset + limit])
    if not page:
        return f"No messages at offset {offset}: the transcript holds {total} (0 to {total - 1})."
    lines = [f"Messages {offset} to {offset + len(page) - 1} of {total} "
             f"(live call {call.id}, {call.status}):"]
    for n, m in enumerate(page, start=offset):
        lines.append(f"[{n}] {_line(m)}")
    if offset + len(page) < total:
        lines.append(f"(more: offset={offset + len(page)})")
    return "\n".join(lines)


def _line(m: Message) -> str:
    kind, data = m.content.get("type"), m.content.get("data")
    if kind == ContentType.USER_MESSAGE:
        text = data.get("text", "") if isinstance(data, dict) else str(data)
        return f"caller: {text}"
    if kind == ContentType.TOOLCALL_INPUT and isinstance(data, dict):
        return f"tool call {data.get('tool_name')}: {data.get('input')}"
    if kind == ContentType.TOOLCALL_OUTPUT and isinstance(data, dict):
        return f"tool result ({data.get('status')}): {data.get('output')}"
    if kind in (ContentType.MARKDOWN, ContentType.TEXT):
        suffix = " [interrupted]" if m.streaming_status == "failed" else ""
        return f"agent: {data}{suffix}"
    return f"{m.role} {kind}: {data}"
