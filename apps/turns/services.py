"""Writes to turns that belong to the data model: the status state machine.

Creating, running and stopping turns is the agent engine's and ``message.send``'s business;
they move a turn only through ``turn_transition``, which guarantees that a turn leaves a status
at most once (one conditional UPDATE) and that terminal statuses never change.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.sessions.selectors import as_uuid
from apps.sessions.statemachine import apply_transition
from rtcagent.errors import InvalidState
from rtcagent.returning import IfNull

from . import state
from .models import ACTIVE_TURN_STATUSES, TERMINAL_TURN_STATUSES, TURN_TRANSITIONS, Turn, TurnStatus


def turn_transition(
    *,
    turn_id: uuid.UUID | str,
    to: str,
    user_id: int | None = None,
    values: Mapping[str, Any] | None = None,
    only_from: Collection[str] | None = None,
) -> Turn:
    """Move a turn along ``TURN_TRANSITIONS`` with one conditional UPDATE; return it fresh.

    Entering ``running`` stamps ``started_at`` the first time; a terminal status stamps
    ``completed_at``. ``values`` (e.g. ``error_message``, token usage) are written in the same
    UPDATE. A terminal status drops the turn's checkpoint: its row with the move (so no ended
    turn is ever seen with one), Redis's copy after the commit. Raises ``InvalidState`` and
    changes nothing when the move is refused; ``NotFound`` when the turn (of ``user_id``, if
    given) is not there. Publishes nothing.
    """
    pk = as_uuid(turn_id, "turn")
    now = timezone.now()
    stamps: dict[str, Any] = dict(values or {})
    if to == TurnStatus.RUNNING:
        stamps["started_at"] = IfNull(now)
    elif to in TERMINAL_TURN_STATUSES:
        stamps["completed_at"] = now
    scope = {"user_id": user_id} if user_id is not None else None
    turn = apply_transition(
        Turn, entity="turn", pk=pk, to=to, table=TURN_TRANSITIONS, scope=scope, values=stamps,
        only_from=only_from,
    )
    if to in TERMINAL_TURN_STATUSES:
        state.checkpoint_drop_row(str(pk))
        transaction.on_commit(lambda: state.checkpoint_uncache(str(pk)), robust=True)
    return turn


def turn_stop(*, user_id: int, session_id: uuid.UUID | str) -> Turn | None:
    """Stop the session's open turn, from any connection or process; None when none is open.

    A running turn is signalled through Redis (a flag, and an interrupt that the worker
    streaming it acts on at once: ``apps.live.interrupts``): it cancels the model call, keeps
    the partial text, closes open RTCs and marks it ``cancelled``. A turn
    waiting on the browser (or not started) is cancelled here, in one transaction, and the
    messages queued behind it may then run. Publishes no Update of its own for a running turn:
    the worker's ``turn.updated`` follows.
    """
    from apps.sessions.selectors import session_get
    from apps.turns import queue
    from apps.turns.runner import close_open_rtcs, publish_turn

    session = session_get(user_id=user_id, session_id=session_id)
    turn = Turn.objects.filter(session_id=session.id, status__in=ACTIVE_TURN_STATUSES).first()
    if turn is None:
        return None
    state.request_stop(str(turn.id))
    from apps.live import interrupts

    interrupts.interrupt(str(turn.id))  # the streaming worker stops at once, not at its poll
    # Read again after raising the flag: a worker that moves the turn to running from now on
    # sees the flag; one that moved it to interrupted before is cancelled below, and a worker
    # that parks a turn after this checks the flag again (apps.turns.worker).
    turn = Turn.objects.get(pk=turn.id)
    if turn.status not in (TurnStatus.PENDING, TurnStatus.INTERRUPTED):
        return turn
    with transaction.atomic():
        try:
            turn = turn_transition(
                turn_id=turn.id, to=TurnStatus.CANCELLED,
                only_from=(TurnStatus.PENDING, TurnStatus.INTERRUPTED),
            )
        except InvalidState:  # a worker is running it now: the flag stops it
            return Turn.objects.get(pk=turn.id)
        close_open_rtcs(turn, reason="the turn was stopped")
        publish_turn(turn)
        transaction.on_commit(lambda: queue.unpark(str(turn.session_id)))
    from apps.tasks.subagents import on_turn_end

    on_turn_end(turn)  # the sync sub-agents it waited on are stopped too
    return turn
