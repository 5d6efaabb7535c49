"""Sub-agents: child sessions started by the ``subAgent`` tool (``docs/subagents.md``).

A child is an ordinary session of the same user with its lineage set (``parent_session``,
``root_session``, ``sub_agent_parent_message``: the parent's message under which the widget
draws it) and one ``SubAgent`` row. Its instruction is its first user message, queued like any
other, so each child is its own queue item and lock: the children of one answer run on
whichever workers are free, in parallel.

* ``sync``: the tool answers ``Deferred(child id)``; the parent turn waits, checkpointed, and
  its ports ask ``deferred_outcome`` on every resume. When a child ends, ``finish`` records the
  result and queues a resume of the parent turn.
* ``async``: the tool answers at once; when the child ends, its result is sent into the parent
  session as a user message (``client_id`` ``subagent:<id>:result``, once), which starts a turn.

Invariants:

* One child per tool call: ``SubAgent.call_message`` is unique, so a step repeated after a crash
  finds the child it started.
* A row leaves ``running`` once (one conditional UPDATE in ``finish``): the parent is resumed
  or notified once, whoever gets there first (the child's end, a stop, the sweep).
* Stopping closes the subtree leaves first: each row is marked stopped before its turn is
  stopped, so the cancelled turn's own end finds nothing left to finish. A closed session
  starts no sub-agent, which closes the race with a child starting one meanwhile.
* Everything is scoped to the user: a child has its parent's user, the RPCs look sessions up
  through ``session_get`` (another user's is ``session.not_found``), and the tools only reach
  sessions of the caller's own tree.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from apps.gateway.events import item, publish_update
from apps.sessions.models import ContentType, Message, MessageRole, Session, SessionStatus
from apps.sessions.selectors import session_get
from apps.sessions.serializers import message_to_dict, session_to_dict
from apps.sessions.services import session_allocate_offsets, session_notify
from rtcagent.conf import app_setting
from rtcagent.errors import InvalidRequest

from .models import SUBAGENT_ENDED, SubAgent, SubAgentStatus

log = logging.getLogger(__name__)

DEFAULTS: dict[str, int] = {
    "SUBAGENT_MAX_DEPTH": 3,  # a root session's children are depth 1
    "SUBAGENT_MAX_PER_STEP": 8,  # sub-agents one model answer may start
    "SUBAGENT_TITLE_MAX_CHARS": 200,
    "SUBAGENT_INSTRUCTION_MAX_CHARS": 20000,
    "SUBAGENT_RESULT_MAX_CHARS": 20000,  # a longer final answer is cut (the child keeps it all)
}
MODES = ("sync", "async")


def subagent_setting(name: str) -> int:
    """``settings.RTCAGENT[name]``, else the environment's ``RTC_<name>``, else the default."""
    return int(app_setting(name, DEFAULTS))


class Refused(Exception):
    """The tool call is refused; the model reads ``[Tool Error] <message>``."""


# --- starting ---------------------------------------------------------------------------------


def _step_prefix(call_message: Message) -> str:
    """``turn:<turn>:<step>:call:`` of a toolcall_input message's client id."""
    parts = call_message.client_id.split(":")
    if len(parts) < 4 or parts[0] != "turn" or parts[3] != "call":
        return call_message.client_id
    return ":".join(parts[:4]) + ":"


def subagent_start(
    *, user_id: int, session_id: str, turn_id: str, call_message_id: str | None,
    title: str, instruction: str, mode: str,
) -> SubAgent:
    """Start the child for this tool call (or find the one it started before a crash).

    ``Refused`` beyond the depth or per-answer limits, or from a stopped (closed) session.
    """
    if mode not in MODES:
        raise Refused(f"mode must be one of {', '.join(MODES)}")
    title, instruction = title.strip(), instruction.strip()
    if not title or not instruction:
        raise Refused("title and instruction must not be blank")
    if call_message_id:
        found = SubAgent.objects.filter(call_message_id=call_message_id).first()
        if found is not None:
            return found
    parent = Session.objects.filter(pk=session_id, user_id=user_id,
                                    deleted_at__isnull=True).first()
    if parent is None:
        raise Refused("this session is gone")
    if parent.status == SessionStatus.CLOSED:
        raise Refused("this session was stopped; it cannot start sub-agents")
    depth = 1 + (SubAgent.objects.filter(session_id=parent.id)
                 .values_list("depth", flat=True).first() or 0)
    most = subagent_setting("SUBAGENT_MAX_DEPTH")
    if depth > most:
        raise Refused(f"sub-agents may be nested at most {most} levels deep; this session is "
                      f"already at depth {depth - 1}. Do the work yourself instead")
    call_message = (Message.objects.filter(pk=call_message_id).first()
                    if call_message_id else None)
    anchor = call_message
    if call_message is not None:
        prefix = _step_prefix(call_message)
        same_step = SubAgent.objects.filter(parent_turn_id=call_message.turn_id,
                                            call_message__client_id__startswith=prefix)
        per_step = subagent_setting("SUBAGENT_MAX_PER_STEP")
        if same_step.count() >= per_step:
            raise Refused(f"at most {per_step} sub-agents may be started in one answer")
        # the widget draws every sub-agent of one answer under the answer's first subAgent call
        anchor = (Message.objects.filter(
            turn_id=call_message.turn_id, client_id__startswith=prefix,
            content__type=ContentType.TOOLCALL_INPUT, content__data__tool_name="subAgent",
        ).order_by("global_offset").first() or call_message)
    try:
        with transaction.atomic():
            return _create(parent, anchor, call_message, turn_id=turn_id, title=title,
                           instruction=instruction, mode=mode, depth=depth)
    except IntegrityError:  # another run of this very step made it first
        found = SubAgent.objects.filter(call_message_id=call_message_id).first()
        if found is None:
            raise
        return found


def _create(parent: Session, anchor: Message | None, call_message: Message | None, *,
            turn_id: str, title: str, instruction: str, mode: str, depth: int) -> SubAgent:
    from apps.turns.queue import enqueue_message

    child = Session.objects.create(
        user_id=parent.user_id, title=title[:255], status=SessionStatus.IDLE,
        work_mode=parent.work_mode, device_id=parent.device_id,
        agent_prompt=parent.agent_prompt, host_functions=parent.host_functions,
        parent_session=parent, root_session_id=parent.root_session_id or parent.id,
        sub_agent_parent_message=anchor,
    )
    sub = SubAgent.objects.create(
        user_id=parent.user_id, session=child, parent_session=parent,
        parent_turn_id=_uuid_or_none(turn_id), call_message=call_message,
        tool_call_id=(call_message.content.get("data", {}).get("id", "")
                      if call_message is not None else "")[:128],
        title=title[:255], mode=mode, depth=depth,
    )
    offset = session_allocate_offsets(session_id=child.id)
    msg = Message.objects.create(
        session=child, user_id=parent.user_id, client_id=f"subagent:{sub.id}",
        global_offset=offset, role=MessageRole.USER,
        content={"type": ContentType.USER_MESSAGE,
                 "data": {"text": instruction,
                          "origin": {"kind": "subagent", "id": str(sub.id), "title": title}}},
    )
    child = Session.objects.select_related("parent_session", "root_session").get(pk=child.pk)
    publish_update(
        user_id=parent.user_id,
        items=[item("session", "created", child.id), item("message", "created", msg.id)],
        data_list=[session_to_dict(child), message_to_dict(msg)],
    )
    transaction.on_commit(
        lambda: enqueue_message(child.id, msg.id, user_id=parent.user_id), robust=True)
    return sub


def _uuid_or_none(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


# --- what the parent is told ------------------------------------------------------------------


def started_text(sub: SubAgent) -> str:
    """The async tool result."""
    return (f'Sub-agent "{sub.title}" started in the background (sub_session_id: '
            f"{sub.session_id}). Its result will be sent to you as a message when it ends; "
            "carry on meanwhile. listSubAgent shows its status, stopSubAgent stops it.")


def result_text(sub: SubAgent) -> str:
    """What the parent reads when the child ended: the sync tool result and the body of the
    async notification."""
    head = f'Sub-agent "{sub.title}" (sub_session_id: {sub.session_id})'
    if sub.status == SubAgentStatus.COMPLETED:
        return f"{head} completed. Its final answer:\n\n{sub.result or '(no answer)'}"
    if sub.status == SubAgentStatus.FAILED:
        return f"[Tool Error] {head} failed: {sub.result or 'unknown error'}"
    return f"{head} was stopped before it finished ({sub.result or 'stopped'})."


def deferred_outcome(ref: str) -> tuple[bool, str, str]:
    """For the parent's ports: ``(finished, text, status)`` of the child session ``ref``."""
    sub = SubAgent.objects.filter(session_id=_uuid_or_none(ref)).first()
    if sub is None:
        return True, "[Tool Error] the sub-agent is gone", "error"
    if sub.status == SubAgentStatus.RUNNING:
        return False, "", ""
    return True, result_text(sub), "error" if sub.status == SubAgentStatus.FAILED else "done"


# --- ending -----------------------------------------------------------------------------------


def _final_answer(turn: Any) -> str:
    texts = (Message.objects.filter(turn_id=turn.id, content__type=ContentType.MARKDOWN)
             .order_by("-global_offset").values_list("content", flat=True))
    for content in texts:
        data = content.get("data")
        if isinstance(data, str) and data.strip():
            return data.strip()
    return ""


def finish(session_id: Any, status: str, result: str, *, notify: bool = True) -> SubAgent | None:
    """End the sub-agent of child session ``session_id`` (once: None if it had ended), then
    resume its waiting parent turn (sync) or send it the result (async)."""
    most = subagent_setting("SUBAGENT_RESULT_MAX_CHARS")
    if len(result) > most:
        result = result[:most] + f"\n[... cut at {most} characters]"
    changed = SubAgent.objects.filter(session_id=session_id, status=SubAgentStatus.RUNNING
                                      ).update(status=status, result=result,
                                               ended_at=timezone.now(), updated_at=timezone.now())
    if not changed:
        return None
    sub = SubAgent.objects.select_related("parent_turn").get(session_id=session_id)
    if notify:
        _tell_parent(sub)
    return sub


def _tell_parent(sub: SubAgent) -> None:
    from apps.turns.models import ACTIVE_TURN_STATUSES
    from apps.turns.queue import enqueue_resume

    if sub.mode == "sync":
        turn = sub.parent_turn
        if turn is not None and turn.status in ACTIVE_TURN_STATUSES:
            enqueue_resume(sub.parent_session_id, turn.id, user_id=sub.user_id)
        return
    session_notify(  # a stopped (closed) parent is told nothing
        session_id=sub.parent_session_id, user_id=sub.user_id,
        client_id=f"subagent:{sub.id}:result", text=result_text(sub),
        origin={"kind": "subagent_result", "id": str(sub.id), "title": sub.title,
                "status": sub.status})


def on_turn_end(turn: Any) -> None:
    """A turn ended (completed, failed or cancelled; after its transaction committed).

    A sub-agent's turn gives it its result; a turn that ended otherwise than completed stops
    the sync sub-agents it still waited on (nobody will read their results). Never raises."""
    from apps.turns.models import TurnStatus

    try:
        if SubAgent.objects.filter(session_id=turn.session_id,
                                   status=SubAgentStatus.RUNNING).exists():
            if turn.status == TurnStatus.COMPLETED:
                finish(turn.session_id, SubAgentStatus.COMPLETED, _final_answer(turn))
            elif turn.status == TurnStatus.FAILED:
                finish(turn.session_id, SubAgentStatus.FAILED,
                       turn.error_message or "the sub-agent's turn failed")
            elif turn.status == TurnStatus.CANCELLED:
                finish(turn.session_id, SubAgentStatus.STOPPED, "its turn was stopped")
        if turn.status != TurnStatus.COMPLETED:
            waited = SubAgent.objects.filter(parent_turn_id=turn.id, mode="sync",
                                             status=SubAgentStatus.RUNNING)
            for sub in waited:
                stop_tree(sub.session_id, reason="the turn that waited on it ended",
                          notify_top=False)
    except Exception:
        log.exception("sub-agent bookkeeping after turn %s failed", getattr(turn, "id", turn))


# --- stopping ---------------------------------------------------------------------------------


def _subtree(session_id: Any) -> list[Session]:
    """The session and its descendants, breadth first (parents before their children)."""
    order = list(Session.objects.filter(pk=session_id))
    frontier = [s.id for s in order]
    while frontier and len(order) < 10_000:
        kids = list(Session.objects.filter(parent_session_id__in=frontier,
                                           deleted_at__isnull=True).order_by("created_at"))
        order += kids
        frontier = [k.id for k in kids]
    return order


def stop_tree(session_id: Any, *, reason: str = "stopped", notify_top: bool = True
              ) -> list[SubAgent]:
    """Stop a sub-agent and its descendants, leaves first: each row marked stopped, its open
    turn stopped, its session closed. Returns the rows that were still running. Only the top
    one's parent is resumed or told, and not with ``notify_top`` False (it asked): the others'
    parents are in the tree, stopped too, and a parent resumed by its child's end could run on
    (answer, complete and report) before its own turn is stopped."""
    from apps.sessions.services import session_close
    from apps.turns.services import turn_stop

    stopped: list[SubAgent] = []
    tree = _subtree(session_id)
    for session in reversed(tree):
        top = session.id == tree[0].id
        sub = finish(session.id, SubAgentStatus.STOPPED, reason, notify=notify_top and top)
        if sub is not None:
            stopped.append(sub)
        try:
            turn_stop(user_id=session.user_id, session_id=session.id)
        except Exception:
            log.exception("stopping the turn of sub-agent session %s failed", session.id)
        if SubAgent.objects.filter(session_id=session.id).exists():
            session_close(user_id=session.user_id, session_id=session.id)
    return stopped


def subagent_stop(*, user_id: int, session_id: Any) -> list[SubAgent]:
    """The user stops one of their sub-agents (and its subtree); its parent resumes."""
    session = session_get(user_id=user_id, session_id=session_id)
    if not SubAgent.objects.filter(session_id=session.id).exists():
        raise InvalidRequest("session_id: this session is not a sub-agent")
    return stop_tree(session.id, reason="stopped by the user")


# --- reading ----------------------------------------------------------------------------------


def in_tree(*, user_id: int, caller_session_id: Any, target_id: Any) -> Session:
    """The target session, if it is a sub-agent below the caller's session (same user, same
    tree, not the caller itself); ``Refused`` otherwise."""
    target = Session.objects.filter(pk=_uuid_or_none(str(target_id)), user_id=user_id,
                                    deleted_at__isnull=True).first()
    caller_id = str(caller_session_id)
    if target is None or str(target.id) == caller_id:
        raise Refused(f"no sub-agent {target_id} below this session")
    node, hops = target, 0
    while node.parent_session_id is not None and hops < 64:
        if str(node.parent_session_id) == caller_id:
            return target
        node = Session.objects.get(pk=node.parent_session_id)
        hops += 1
    raise Refused(f"no sub-agent {target_id} below this session")


def last_message(session_id: Any) -> Message | None:
    """The latest message worth reading: an answer, an error, or the instruction."""
    kinds = [ContentType.MARKDOWN, ContentType.ERROR, ContentType.USER_MESSAGE]
    return (Message.objects.filter(session_id=session_id, deleted_at__isnull=True,
                                   content__type__in=kinds)
            .order_by("-global_offset").first())


def message_text(msg: Message | None) -> str:
    if msg is None:
        return ""
    data = msg.content.get("data")
    if isinstance(data, str):
        return data
    if isinstance(data, dict):
        if msg.content.get("type") == ContentType.ERROR:
            return f"{data.get('title', 'Error')}: {data.get('message', '')}"
        return str(data.get("text", ""))
    return ""


def descendants(session_id: Any) -> list[SubAgent]:
    tree = [s.id for s in _subtree(session_id)[1:]]
    return list(SubAgent.objects.filter(session_id__in=tree).order_by("created_at"))


# --- housekeeping -----------------------------------------------------------------------------


def sweep(quiet_seconds: float) -> int:
    """Running rows whose child has no open turn left (its worker died between the turn's end
    and ``finish``): finished from the child's last turn, as its runner would have."""
    from apps.turns.models import ACTIVE_TURN_STATUSES, Turn

    quiet = timezone.now() - timedelta(seconds=quiet_seconds)
    open_turn = Turn.objects.filter(session_id=OuterRef("session_id"),
                                    status__in=ACTIVE_TURN_STATUSES)
    queued = Message.objects.filter(session_id=OuterRef("session_id"), role=MessageRole.USER,
                                    turn__isnull=True, deleted_at__isnull=True)
    stuck = (SubAgent.objects.filter(status=SubAgentStatus.RUNNING, updated_at__lt=quiet)
             .exclude(Exists(open_turn)).exclude(Exists(queued)))
    count = 0
    for sub in stuck[:100]:
        turn = Turn.objects.filter(session_id=sub.session_id).order_by("-created_at").first()
        if turn is None:
            continue
        on_turn_end(turn)
        count += 1
    return count


__all__ = ["MODES", "SUBAGENT_ENDED", "Refused", "deferred_outcome", "finish", "on_turn_end",
           "result_text", "started_text", "stop_tree", "subagent_setting", "subagent_start",
           "subagent_stop", "sweep"]
