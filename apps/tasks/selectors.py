"""Reads of goals and loops, always scoped to their owner (another user's row is not found)."""

from __future__ import annotations

import uuid

from apps.sessions.models import Message, MessageRole
from apps.sessions.pagination import Page, keyset_page, page_limit
from apps.sessions.selectors import as_uuid, session_get, waiting_for_turn
from rtcagent.errors import NotFound

from .models import Goal, GoalStatus, Loop

LOOP_PAGE_DEFAULT = 50


def goal_get(*, user_id: int, session_id: uuid.UUID | str) -> Goal | None:
    """The session's active goal, else its latest one (``None`` when it never had one);
    ``NotFound('session')`` for a session the caller cannot see."""
    session = session_get(user_id=user_id, session_id=session_id)
    goals = Goal.objects.filter(session=session)
    return (goals.filter(status=GoalStatus.ACTIVE).first()
            or goals.order_by("-created_at", "-id").first())


def active_goal(session_id: uuid.UUID | str) -> Goal | None:
    """The session's active goal (no ownership check: for the worker)."""
    return Goal.objects.filter(session_id=session_id, status=GoalStatus.ACTIVE).first()


def loop_get(*, user_id: int, loop_id: uuid.UUID | str) -> Loop:
    """The caller's loop, in a session that is not soft-deleted; ``NotFound('loop')`` else."""
    pk = as_uuid(loop_id, "loop")
    loop = Loop.objects.filter(pk=pk, user_id=user_id, session__deleted_at__isnull=True).first()
    if loop is None:
        raise NotFound("loop", pk)
    return loop


def loop_list(
    *, user_id: int, session_id: uuid.UUID | str | None = None, cursor: str | None = None,
    limit: int | None = None,
) -> Page:
    """The caller's loops (of one session when ``session_id`` is given), newest first,
    keyset-paged on ``(created_at, id)``; ``NotFound('session')`` for a session not visible."""
    rows = Loop.objects.filter(user_id=user_id, session__deleted_at__isnull=True)
    if session_id is not None:
        rows = rows.filter(session=session_get(user_id=user_id, session_id=session_id))
    return keyset_page(rows, field="created_at", cursor=cursor,
                       limit=page_limit(limit, default=LOOP_PAGE_DEFAULT), descending=True)


def pending_user_message(session_id: uuid.UUID | str) -> bool:
    """A user message of the session waits for its turn (sent, not yet started: no turn yet, or
    the one created with it still pending): whatever a goal or loop would send now would only
    queue behind it."""
    return (
        waiting_for_turn(Message.objects.filter(session_id=session_id, role=MessageRole.USER,
                                                deleted_at__isnull=True))
        .exclude(client_id="")  # fork copies: history, never a turn
        .exists()
    )
