"""Services of goals: set, end (complete, cancel), and count a round after each turn.

A goal is a condition the agent works towards across turns. After each completed turn of its
session (``goal_round``, called from ``apps.tasks.hooks.after_turn`` and, for a turn whose hook
never ran, from the scheduler's sweep) the round count goes up; while the goal is active and
rounds are left, a short user message starts the next round, unless a message already waits
for its turn (that turn is the next round: rounds never pile up). At ``max_rounds`` the goal is
``exhausted``. Every change publishes the ``goal`` entity in the same transaction.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from apps.gateway.events import item, publish_update
from apps.sessions.models import SessionStatus
from apps.sessions.selectors import session_get
from apps.sessions.statemachine import apply_transition
from apps.turns.models import Turn, TurnStatus
from rtcagent.errors import InvalidRequest, InvalidState, RtcError

from .limits import task_setting
from .models import GOAL_TRANSITIONS, Goal, GoalStatus
from .prompt import goal_continue_text, goal_kickoff_text
from .selectors import pending_user_message
from .sending import NewSession, send_prompt
from .serializers import goal_to_dict

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GoalChange:
    """A goal after an action (``None``: the session has none), and the Updates published."""

    goal: Goal | None
    updates: list[dict[str, Any]] = field(default_factory=list)
    replaced: Goal | None = None  # the active goal a new one cancelled


def _publish(goal: Goal, action: str) -> dict[str, Any]:
    return publish_update(user_id=goal.user_id, items=[item("goal", action, goal.id)],
                          data_list=[goal_to_dict(goal)])


def check_condition(condition: Any) -> str:
    """The condition, stripped; ``InvalidRequest`` when empty or too long."""
    limit = int(task_setting("GOAL_CONDITION_MAX_CHARS"))
    if not isinstance(condition, str) or not condition.strip():
        raise InvalidRequest("condition: required")
    condition = condition.strip()
    if len(condition) > limit:
        raise InvalidRequest(f"condition: at most {limit} characters ({len(condition)} given)")
    return condition


def check_max_rounds(max_rounds: Any) -> int:
    """``max_rounds`` (the default when ``None``); ``InvalidRequest`` outside 1..GOAL_MAX_ROUNDS."""
    if max_rounds is None:
        return int(task_setting("GOAL_DEFAULT_MAX_ROUNDS"))
    top = int(task_setting("GOAL_MAX_ROUNDS"))
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) \
            or not 1 <= max_rounds <= top:
        raise InvalidRequest(f"max_rounds: must be an integer from 1 to {top}")
    return max_rounds


def lock_user(user_id: int) -> None:
    """Lock the user's row until commit (``FOR NO KEY UPDATE``: foreign-key checks of other
    writers are not blocked). Goal changes take it first, in the order ``message_send`` takes
    its locks (user, then session), so they never deadlock with it or with each other."""
    list(get_user_model().objects.select_for_update(no_key=True).filter(pk=user_id)
         .values_list("pk", flat=True))


def _end(goal: Goal, to: str, outcome: str) -> Goal:
    apply_transition(Goal, entity="goal", pk=goal.pk, to=to, table=GOAL_TRANSITIONS,
                     values={"outcome": outcome[:2000], "ended_at": timezone.now()})
    return Goal.objects.get(pk=goal.pk)


def goal_set(
    *, user_id: int, session_id: uuid.UUID | str | None, condition: str,
    max_rounds: int | None = None, kickoff: bool = True, new_session: NewSession | None = None,
) -> GoalChange:
    """Give the caller's session a goal; its active goal, if any, is cancelled (replaced).

    With ``kickoff`` (the user set it) a first message (``/goal <condition>`` and what to do)
    starts the work, unless a user message already waits for its turn; the agent setting a
    goal from a turn (``kickoff=False``) goes on in that turn, and its end counts round 1.
    Without ``session_id`` (a ``/goal`` typed in a new conversation) the kickoff message
    creates the session as ``new_session`` says. Refused with ``InvalidRequest`` (bad
    condition, max_rounds or session fields), ``InvalidState`` (closed session), ``NotFound``
    (not the caller's session) or ``RateLimited`` (the kickoff is beyond the user's caps); a
    refusal changes nothing.
    """
    condition = check_condition(condition)
    max_rounds = check_max_rounds(max_rounds)
    if session_id is None:
        return _goal_in_new_session(user_id=user_id, condition=condition,
                                    max_rounds=max_rounds, new_session=new_session)
    with transaction.atomic():
        # One goal change at a time per user: a second goal_set waits here and replaces the
        # first. The user's row first, as message_send locks it (then the session's).
        lock_user(user_id)
        session = session_get(user_id=user_id, session_id=session_id)
        if session.status == SessionStatus.CLOSED:
            raise InvalidState(f"session {session.id} is closed; open it first")
        updates: list[dict[str, Any]] = []
        replaced = Goal.objects.filter(session=session, status=GoalStatus.ACTIVE).first()
        if replaced is not None:
            replaced = _end(replaced, GoalStatus.CANCELLED, "replaced by a new goal")
            updates.append(_publish(replaced, "updated"))
        goal = Goal.objects.create(session=session, user_id=user_id, condition=condition,
                                   max_rounds=max_rounds)
        updates.append(_publish(goal, "created"))
        if kickoff and not pending_user_message(session.id):
            sent = send_prompt(
                user_id=user_id, session_id=session.id, text=goal_kickoff_text(condition),
                client_id=f"goal:{goal.id}:0",
                origin={"kind": "goal", "id": str(goal.id), "round": 0},
            )
            updates += sent.updates
    return GoalChange(goal=goal, updates=updates, replaced=replaced)


def _goal_in_new_session(
    *, user_id: int, condition: str, max_rounds: int, new_session: NewSession | None,
) -> GoalChange:
    if new_session is None:
        raise InvalidRequest("session_id: required (or what creates a new session)")
    goal_id = uuid.uuid4()  # named by its kickoff message, which is written first
    with transaction.atomic():
        lock_user(user_id)
        sent = send_prompt(
            user_id=user_id, session_id=None, text=goal_kickoff_text(condition),
            client_id=f"goal:{goal_id}:0", new_session=new_session,
            origin={"kind": "goal", "id": str(goal_id), "round": 0},
        )
        goal = Goal.objects.create(id=goal_id, session=sent.session, user_id=user_id,
                                   condition=condition, max_rounds=max_rounds)
        return GoalChange(goal=goal, updates=[*sent.updates, _publish(goal, "created")])


def goal_end(
    *, user_id: int, session_id: uuid.UUID | str, to: str, outcome: str = "",
) -> GoalChange:
    """End the session's active goal as ``completed`` or ``cancelled`` with ``outcome`` (what
    the agent reported, or who cancelled it). Idempotent: without an active goal nothing
    changes and the change carries the latest goal (or ``None``) and no Update."""
    if to not in (GoalStatus.COMPLETED, GoalStatus.CANCELLED):
        raise ValueError(f"a goal is not ended as {to!r}")
    with transaction.atomic():
        session = session_get(user_id=user_id, session_id=session_id)
        goal = Goal.objects.filter(session=session, status=GoalStatus.ACTIVE).first()
        if goal is not None:
            try:
                goal = _end(goal, to, outcome)
            except InvalidState:  # ended meanwhile (its last round, another caller)
                goal = Goal.objects.get(pk=goal.pk)
            else:
                return GoalChange(goal=goal, updates=[_publish(goal, "updated")])
        latest = goal or Goal.objects.filter(session=session).order_by("-created_at").first()
        return GoalChange(goal=latest)


def goal_round(*, turn: Turn) -> GoalChange | None:
    """Count the completed ``turn`` as a round of its session's active goal, then exhaust the
    goal or start the next round. ``None`` when nothing changed: no active goal, a turn that
    did not complete, one older than the goal, or one counted already (the hook and the sweep
    may both come; the round moves with ``last_turn`` in one conditional UPDATE)."""
    if turn.status != TurnStatus.COMPLETED or turn.completed_at is None:
        return None
    if not Goal.objects.filter(session_id=turn.session_id, status=GoalStatus.ACTIVE).exists():
        return None  # most turns: no lock taken
    with transaction.atomic():
        lock_user(turn.user_id)  # before the goal's row, in goal_set's order
        goal = Goal.objects.filter(session_id=turn.session_id, status=GoalStatus.ACTIVE).first()
        if goal is None or turn.completed_at < goal.created_at:
            return None
        counted = (
            Goal.objects.filter(pk=goal.pk, status=GoalStatus.ACTIVE)
            .filter(Q(last_turn__isnull=True) | Q(last_turn__completed_at__lt=turn.completed_at))
            .update(rounds=F("rounds") + 1, last_turn=turn, updated_at=timezone.now())
        )
        if not counted:
            return None
        goal = Goal.objects.get(pk=goal.pk)
        if goal.rounds >= goal.max_rounds:
            goal = _end(goal, GoalStatus.EXHAUSTED,
                        f"not met after {goal.max_rounds} rounds")
            return GoalChange(goal=goal, updates=[_publish(goal, "updated")])
        updates = [_publish(goal, "updated")]
        if not pending_user_message(goal.session_id):
            updates += _next_round(goal)
        return GoalChange(goal=goal, updates=updates)


def _next_round(goal: Goal) -> list[dict[str, Any]]:
    """Send the message of round ``rounds + 1``; a refusal (caps, closed session) leaves the
    goal active and waiting: the user's next message carries it on."""
    try:
        with transaction.atomic():
            sent = send_prompt(
                user_id=goal.user_id, session_id=goal.session_id,
                text=goal_continue_text(goal.condition),
                client_id=f"goal:{goal.id}:{goal.rounds}",
                origin={"kind": "goal", "id": str(goal.id), "round": goal.rounds},
            )
    except RtcError as exc:
        log.info("goal %s: round %d not started: %s", goal.id, goal.rounds + 1, exc.message)
        return []
    return sent.updates
