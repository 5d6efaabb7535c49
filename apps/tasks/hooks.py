"""What the turn runner asks of goals and todos (``apps.turns.runner`` calls these two).

* ``after_turn(turn)``: once a turn has *completed* (not failed, not cancelled): the session's
  active goal counts a round and starts the next one, or becomes exhausted.
* ``prompt_reminders(session_id)``: texts for the volatile tail of each request (after the
  conversation, with the recalled memories): the active goal and the todo list. Built anew
  for every request and never stored, so they do not pile up in the conversation.

Neither raises: a failure is logged and the turn goes on (a missed round is made up by the
scheduler's sweep, ``apps.tasks.scheduler.goals_sweep``).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from apps.sessions.models import Session

from .goals import goal_round
from .models import Goal, GoalStatus
from .prompt import goal_reminder, todo_reminder

log = logging.getLogger(__name__)


def after_turn(turn: Any) -> None:
    """Call once the turn ``turn`` (an ``apps.turns.models.Turn``) has completed, after the
    transaction that completed it committed; calling it again for the same turn is harmless."""
    try:
        goal_round(turn=turn)
    except Exception:
        log.exception("goal round after turn %s failed", getattr(turn, "id", turn))


def prompt_reminders(session_id: uuid.UUID | str) -> list[str]:
    """The reminders of the session's next request, in a stable order (goal, then todos)."""
    try:
        texts: list[str] = []
        goal = (Goal.objects.filter(session_id=session_id, status=GoalStatus.ACTIVE)
                .values("condition", "rounds", "max_rounds").first())
        if goal is not None:
            texts.append(goal_reminder(**goal))
        todo_list = (Session.objects.filter(pk=session_id)
                     .values_list("todo_list", flat=True).first())
        todos = todo_reminder(todo_list or [])
        if todos:
            texts.append(todos)
        return texts
    except Exception:
        log.exception("reminders of session %s failed", session_id)
        return []
