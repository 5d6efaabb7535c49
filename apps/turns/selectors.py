"""Reads of turns, always scoped to their owner.

A turn of another user, of a soft-deleted session, or that does not exist is the same
``NotFound('turn')``. Lists are keyset-paged in creation order (oldest first).
"""

from __future__ import annotations

import uuid

from apps.sessions.pagination import Page
from apps.sessions.selectors import owned_get, owned_list

from .models import Turn


def turn_get(*, user_id: int, turn_id: uuid.UUID | str) -> Turn:
    """The caller's visible turn ``turn_id``, or ``NotFound('turn')``."""
    return owned_get(Turn, "turn", user_id=user_id, pk=turn_id)


def turn_list(
    *,
    user_id: int,
    session_id: uuid.UUID | str,
    cursor: str | None = None,
    limit: int | None = None,
) -> Page:
    """Turns of the caller's session in creation order (50 a page by default)."""
    return owned_list(Turn, user_id=user_id, session_id=session_id, cursor=cursor, limit=limit)
