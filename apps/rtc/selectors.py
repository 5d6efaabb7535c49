"""Reads of remote tool calls, always scoped to their owner.

An RTC of another user, of a soft-deleted session, or that does not exist is the same
``NotFound('rtc')``. Lists are keyset-paged in creation order (oldest first).
"""

from __future__ import annotations

import uuid

from django.db.models import QuerySet

from apps.sessions.pagination import Page, keyset_page, page_limit
from apps.sessions.selectors import as_uuid, session_get
from rtcagent.errors import NotFound

from .models import Rtc

RTC_PAGE_DEFAULT = 50


def visible_rtcs(*, user_id: int) -> QuerySet[Rtc]:
    """The caller's RTCs that are not deleted and whose session is not soft-deleted."""
    return Rtc.objects.filter(
        user_id=user_id, deleted_at__isnull=True, session__deleted_at__isnull=True
    )


def rtc_get(*, user_id: int, rtc_id: uuid.UUID | str) -> Rtc:
    """The caller's visible RTC ``rtc_id``, or ``NotFound('rtc')``."""
    pk = as_uuid(rtc_id, "rtc")
    rtc = visible_rtcs(user_id=user_id).filter(pk=pk).first()
    if rtc is None:
        raise NotFound("rtc", pk)
    return rtc


def rtc_list(
    *,
    user_id: int,
    session_id: uuid.UUID | str,
    cursor: str | None = None,
    limit: int | None = None,
) -> Page:
    """RTCs of the caller's session in creation order, keyset-paged on ``(created_at, id)``;
    ``limit`` defaults to 50 and is capped at ``PAGE_MAX``. ``NotFound('session')`` for a
    session that is not visible."""
    session = session_get(user_id=user_id, session_id=session_id)
    size = page_limit(limit, default=RTC_PAGE_DEFAULT)
    return keyset_page(
        visible_rtcs(user_id=user_id).filter(session=session),
        field="created_at",
        cursor=cursor,
        limit=size,
        descending=False,
    )
