"""Reads of rtcs, always scoped to their owner.

A rtc of another user, of a soft-deleted session, or that does not exist is the same
``NotFound('rtc')``. Lists are keyset-paged in creation order (oldest first).
"""

from __future__ import annotations

import uuid

from apps.sessions.pagination import Page
from apps.sessions.selectors import owned_get, owned_list

from .models import Rtc


def rtc_get(*, user_id: int, rtc_id: uuid.UUID | str) -> Rtc:
    """The caller's visible rtc ``rtc_id``, or ``NotFound('rtc')``."""
    return owned_get(Rtc, "rtc", user_id=user_id, pk=rtc_id)


def rtc_list(
    *,
    user_id: int,
    session_id: uuid.UUID | str,
    cursor: str | None = None,
    limit: int | None = None,
) -> Page:
    """RTCs of the caller's session in creation order (50 a page by default)."""
    return owned_list(Rtc, user_id=user_id, session_id=session_id, cursor=cursor, limit=limit)
