"""Reads of sessions and messages, always scoped to their owner.

Every selector takes the caller's ``user_id``: a row of another user, a soft-deleted session (or
anything inside one) and a row that does not exist are the same ``NotFound``, so nobody learns
that someone else's id exists. Selectors return model instances for services and handlers to
serialize; they never write.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet

from rtcagent.errors import InvalidRequest, NotFound

from .models import Message, Session
from .pagination import Page, keyset_page, page_limit

SESSION_PAGE_DEFAULT = 20
MESSAGE_PAGE_DEFAULT = 50


def as_uuid(value: uuid.UUID | str, entity: str) -> uuid.UUID:
    """``value`` as a UUID; a malformed id cannot name anything, so it is ``NotFound``."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise NotFound(entity, value) from None


def visible_sessions(*, user_id: int) -> QuerySet[Session]:
    """The caller's sessions that are not soft-deleted (no joins: see ``with_lineage``)."""
    return Session.objects.filter(user_id=user_id, deleted_at__isnull=True)


def with_lineage(rows: Iterable[Session], *, known: Iterable[Session] = ()) -> None:
    """Attach the parent and root sessions the wire shape names (their ``client_session_id``)
    to the sub-agent sessions among ``rows``, in at most one narrow query.

    Root sessions (most rows) have neither, so a page of them costs nothing; a self-join on
    every list would read ~90 columns per row for two empty strings. ``known`` sessions (say
    the parent a list was filtered by) are used without a query. Rows left without it still
    serialize correctly: the serializer then loads the reference itself.
    """
    rows = list(rows)
    found: dict[uuid.UUID, Session] = {s.pk: s for s in (*known, *rows)}
    wanted = {
        pk
        for s in rows
        for pk in (s.parent_session_id, s.root_session_id)
        if pk is not None and pk not in found
    }
    if wanted:
        for s in Session.objects.filter(pk__in=wanted).only("id", "client_session_id"):
            found[s.pk] = s
    for s in rows:
        if s.parent_session_id in found:
            s.parent_session = found[s.parent_session_id]
        if s.root_session_id in found:
            s.root_session = found[s.root_session_id]


def session_get(*, user_id: int, session_id: uuid.UUID | str) -> Session:
    """The caller's visible session ``session_id``, or ``NotFound('session')``."""
    pk = as_uuid(session_id, "session")
    session = visible_sessions(user_id=user_id).filter(pk=pk).first()
    if session is None:
        raise NotFound("session", pk)
    return session


def session_list(*, user_id: int, cursor: str | None = None, limit: int | None = None,
                 parent_session_id: uuid.UUID | str | None = None) -> Page:
    """The caller's visible root sessions (sub-agents are not conversations of their own), or
    with ``parent_session_id`` the sub-agents that session started (``NotFound`` when it is
    not the caller's); most recently updated first, keyset-paged on ``(updated_at, id)``;
    ``limit`` defaults to 20 and is capped at ``PAGE_MAX``."""
    size = page_limit(limit, default=SESSION_PAGE_DEFAULT)
    known: list[Session] = []
    if parent_session_id is None:
        rows = visible_sessions(user_id=user_id).filter(parent_session__isnull=True)
    else:
        parent = session_get(user_id=user_id, session_id=parent_session_id)
        rows = visible_sessions(user_id=user_id).filter(parent_session_id=parent.id)
        known.append(parent)
    page = keyset_page(
        rows,
        field="updated_at",
        cursor=cursor,
        limit=size,
        descending=True,
    )
    with_lineage(page.items, known=known)
    return page


def visible_messages(*, user_id: int) -> QuerySet[Message]:
    """The caller's messages that are not deleted and whose session is not soft-deleted."""
    return Message.objects.filter(
        user_id=user_id, deleted_at__isnull=True, session__deleted_at__isnull=True
    )


def message_get(*, user_id: int, message_id: uuid.UUID | str) -> Message:
    """The caller's visible message ``message_id``, or ``NotFound('message')``."""
    pk = as_uuid(message_id, "message")
    message = visible_messages(user_id=user_id).filter(pk=pk).first()
    if message is None:
        raise NotFound("message", pk)
    return message


@dataclass(frozen=True)
class MessagePage:
    """Messages in ``global_offset`` order; ``next_cursor`` is the last offset, or ``None``
    when there are no more."""

    items: list[Message]
    next_cursor: int | None


def message_list(
    *,
    user_id: int,
    session_id: uuid.UUID | str,
    cursor: int | None = None,
    limit: int | None = None,
) -> MessagePage:
    """Messages of the caller's session with ``global_offset > cursor``, ascending.

    ``cursor`` is a ``global_offset`` (absent: from the start); ``limit`` defaults to 50 and is
    capped at ``PAGE_MAX``. ``NotFound('session')`` for a session that is not visible.
    """
    session = session_get(user_id=user_id, session_id=session_id)
    size = page_limit(limit, default=MESSAGE_PAGE_DEFAULT)
    if cursor is not None and (isinstance(cursor, bool) or not isinstance(cursor, int)):
        raise InvalidRequest("cursor: must be a non-negative integer")
    if cursor is not None and cursor < 0:
        raise InvalidRequest("cursor: must be a non-negative integer")
    rows = visible_messages(user_id=user_id).filter(session=session)
    if cursor is not None:
        rows = rows.filter(global_offset__gt=cursor)
    page = list(rows.order_by("global_offset")[: size + 1])
    if len(page) <= size:
        return MessagePage(items=page, next_cursor=None)
    page = page[:size]
    return MessagePage(items=page, next_cursor=page[-1].global_offset)


def messages_before(*, session: Session, global_offset: int, limit: int) -> list[Message]:
    """The last ``limit`` visible messages of ``session`` before ``global_offset``, ascending."""
    rows = Message.objects.filter(
        session=session, deleted_at__isnull=True, global_offset__lt=global_offset
    ).order_by("-global_offset")[:limit]
    return list(reversed(list(rows)))


def visible_in_sessions(model: type[Any], *, user_id: int) -> QuerySet[Any]:
    """Rows of ``model`` (a Turn or Rtc) the caller may see: theirs, not deleted, and in a
    session that is not soft-deleted."""
    return model.objects.filter(
        user_id=user_id, deleted_at__isnull=True, session__deleted_at__isnull=True
    )


def owned_get(model: type[Any], entity: str, *, user_id: int, pk: uuid.UUID | str,
              related: tuple[str, ...] = ()) -> Any:
    """The caller's visible ``model`` row ``pk``, or ``NotFound(entity)`` (never tell which);
    ``related``: foreign keys read in the same query."""
    key = as_uuid(pk, entity)
    rows = visible_in_sessions(model, user_id=user_id).filter(pk=key)
    row = (rows.select_related(*related) if related else rows).first()
    if row is None:
        raise NotFound(entity, key)
    return row


def owned_list(
    model: type[Any],
    *,
    user_id: int,
    session_id: uuid.UUID | str,
    cursor: str | None,
    limit: int | None,
    default: int = 50,
) -> Page:
    """The caller's visible rows of one session in creation order, keyset-paged on
    ``(created_at, id)``; ``NotFound('session')`` for a session that is not visible."""
    session = session_get(user_id=user_id, session_id=session_id)
    return keyset_page(
        visible_in_sessions(model, user_id=user_id).filter(session=session),
        field="created_at",
        cursor=cursor,
        limit=page_limit(limit, default=default),
        descending=False,
    )


def waiting_for_turn(messages: QuerySet[Message]) -> QuerySet[Message]:
    """Those of ``messages`` whose turn has not started: none yet (queued behind another), or
    the one created with the message still pending (``message_send``)."""
    from apps.turns.models import TurnStatus

    return messages.filter(Q(turn__isnull=True) | Q(turn__status=TurnStatus.PENDING))
