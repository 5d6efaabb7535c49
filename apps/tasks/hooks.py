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

import json
import logging
import uuid
from typing import Any

from django.db import connection

from apps.sessions.models import Session
from rtcagent.rows import read

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
    """The reminders of the session's next request, in a stable order (goal, then todos).

    One statement reads both (the session's todo list and its active goal, if any), written as
    SQL: it runs before every model request, where the ORM's two queries cost about four
    times as much CPU to build as to run."""
    try:
        texts: list[str] = []
        found = read(*reminders_statement(session_id))
        if not found:
            return texts
        todo_list, condition, rounds, max_rounds = found[0]
        if condition is not None:
            texts.append(goal_reminder(condition=condition, rounds=rounds,
                                       max_rounds=max_rounds))
        if isinstance(todo_list, str):  # Django reads JSON columns as text
            todo_list = json.loads(todo_list)
        todos = todo_reminder(todo_list or [])
        if todos:
            texts.append(todos)
        return texts
    except Exception:
        log.exception("reminders of session %s failed", session_id)
        return []


def reminders_statement(session_id: uuid.UUID | str) -> tuple[str, list[Any]]:
    """``prompt_reminders``'s statement (``rtcagent.rows.together`` reads it with others)."""
    pk = Session._meta.pk.get_db_prep_value(uuid.UUID(str(session_id)), connection)
    return (f"SELECT s.todo_list, g.condition, g.rounds, g.max_rounds"  # noqa: S608
            f" FROM {Session._meta.db_table} s LEFT JOIN {Goal._meta.db_table} g"
            " ON g.session_id = s.id AND g.status = %s WHERE s.id = %s"
            " ORDER BY g.id LIMIT 1", [GoalStatus.ACTIVE, pk])
