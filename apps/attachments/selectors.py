"""Reads of attachments: always scoped to their owner (another user's file is not found)."""

from __future__ import annotations

import uuid

from apps.sessions.pagination import Page, keyset_page, page_limit
from apps.sessions.selectors import session_get
from rtcagent.errors import NotFound

from .models import Attachment


def attachment_thumbnail_key(*, user_id: object, attachment_id: uuid.UUID) -> str:
    """The derived object key of the caller's attachment's thumbnail; ``NotFound``
    (``file.not_found``) when there is none, or when the attachment is not the caller's."""
    key = (
        Attachment.objects.filter(pk=attachment_id, user_id=user_id)
        .values_list("thumbnail_key", flat=True)
        .first()
    )
    if not key:
        raise NotFound("file", attachment_id)
    return key


def attachment_list(
    *, user_id: int, session_id: uuid.UUID | str, cursor: str | None = None,
    limit: int | None = None,
) -> Page:
    """The processed attachments (``file`` entities) of the caller's session, in creation order,
    those of deleted messages left out; ``NotFound('session')`` for a session not visible."""
    session = session_get(user_id=user_id, session_id=session_id)
    rows = Attachment.objects.filter(
        user_id=user_id, session=session, message__deleted_at__isnull=True
    )
    return keyset_page(
        rows, field="created_at", cursor=cursor, limit=page_limit(limit, default=50),
        descending=False,
    )
