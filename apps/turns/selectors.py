"""Reads of turns, always scoped to their owner.

A turn of another user, of a soft-deleted session, or that does not exist is the same
``NotFound('turn')``. Lists are keyset-paged in creation order (oldest first).
"""

from __future__ import annotations

import uuid

from django.db.models import QuerySet

from apps.sessions.pagination import Page, keyset_page, page_limit
from apps.sessions.selectors import as_uuid, session_get
from rtcagent.errors import NotFound

from .models import Turn

TURN_PAGE_DEFAULT = 50


def visible_turns(*, user_id: int) -> QuerySet[Turn]:
    """The caller's turns that are not deleted and whose session is not soft-deleted."""
    return Turn.objects.filter(
        user_id=user_id, deleted_at__isnull=True, session__deleted_at__isnull=True
    )


def turn_get(*, user_id: int, turn_id: uuid.UUID | str) -> Turn:
    """The caller's visible turn ``turn_id``, or ``NotFound('turn')``."""
    pk = as_uuid(turn_id, "turn")
    turn = visible_turns(user_id=user_id).filter(pk=pk).first()
    if turn is None:
        raise NotFound("turn", pk)
    return turn


def turn_list(
    *,
    user_id: int,
    session_id: uuid.UUID | str,
    cursor: str | None = None,
    limit: int | None = None,
) -> Page:
    """Turns of the caller's session in creation order, keyset-paged on ``(created_at, id)``;
    ``limit`` defaults to 50 and is capped at ``PAGE_MAX``. ``NotFound('session')`` for a
    session that is not visible."""
    session = session_get(user_id=user_id, session_id=session_id)
    size = page_limit(limit, default=TURN_PAGE_DEFAULT)
    return keyset_page(
        visible_turns(user_id=user_id).filter(session=session),
        field="created_at",
        cursor=cursor,
        limit=size,
        descending=False,
    )
