"""One RTC at a time per device across a sub-agent tree.

A session has at most one unfinished RTC (its turn runs one call at a time). Sub-agents run in
parallel, and their browser tools go to the root session's device (a child takes its parent's
``device_id``), so without a gate the sessions of one tree could ask the same browser several
things at once. ``admit`` is asked right before an RTC is created, inside the creating
transaction: with the root session's row locked, it refuses while another session of the tree
has an RTC open. The refused turn waits (``interrupted``, no RTC) and is resumed when that RTC
ends (``wake_after_commit``), or by the sweeper's orphan pass if the wake was lost; it then
asks again. Sessions without sub-agents skip the gate (nothing changes for them).

A waiter is registered in Redis before the check, so an RTC that ends between the check and
the refusal still wakes it; a spurious wake costs one resume that asks again.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from typing import Any

import redis
from django.db import connection, transaction
from django.db.models import Q

from apps.rtc.models import TERMINAL_RTC_STATUSES, Rtc
from apps.sessions.models import Session
from rtcagent.redis import get_redis
from rtcagent.rows import Columns

WAITERS_TTL = 24 * 3600


def _key(root_id: object) -> str:
    return f"rtc:gate:{{{root_id}}}:waiters"


def _root(session: Session) -> uuid.UUID:
    return session.root_session_id or session.id


_SESSION = Columns(Session, "s", ("id", "user_id", "work_mode", "root_session_id"))


@functools.cache
def _rtc_session_sql() -> str:
    table = Session._meta.db_table
    return (f"SELECT {_SESSION.sql()}, EXISTS (SELECT 1 FROM {table} c "  # noqa: S608 - model names
            f"WHERE c.root_session_id = s.id) FROM {table} s WHERE s.id = %s")


def rtc_session(session_id: Any) -> Session:
    """The session as an RTC's creation needs it now, in one statement: its work mode (the
    user may have switched it during the turn), its owner and root, and ``is_root``: whether
    other sessions have it as their root (``admit`` reads it). Hand-written
    (``rtcagent.rows``): it is on the path of every browser tool call, and the ORM's query
    cost five times its run to compile."""
    pk = Session._meta.pk.get_db_prep_value(uuid.UUID(str(session_id)), connection)
    with connection.cursor() as cursor:
        cursor.execute(_rtc_session_sql(), [pk])
        row = cursor.fetchone()
    if row is None:
        raise Session.DoesNotExist(session_id)
    session = _SESSION.build(row[:-1])
    session.is_root = bool(row[-1])
    return session


@functools.cache
def _allocate_sql() -> str:
    q = connection.ops.quote_name
    table = q(Session._meta.db_table)
    column = q(Session._meta.get_field("last_message_offset").column)
    named = Columns(Session, table, _SESSION.names)  # SQLite's RETURNING takes no alias
    return (f"UPDATE {table} SET {column} = {column} + %s WHERE {table}.id = %s "  # noqa: S608
            f"RETURNING {table}.{column}, {named.sql()}, EXISTS (SELECT 1 FROM {table} c "
            f"WHERE c.root_session_id = {table}.id)")


def allocate_with_session(session_id: Any, count: int = 1) -> tuple[int, Session]:
    """``apps.sessions.services.session_allocate_offsets`` and ``rtc_session`` in one
    statement (the call message's offset and the gate's read of its session, on the path of
    every browser tool call): the first of ``count`` offsets reserved, and the session as
    ``admit`` reads it, its row now locked by the update until the transaction ends."""
    if count < 1:
        raise ValueError("count must be positive")
    pk = Session._meta.pk.get_db_prep_value(uuid.UUID(str(session_id)), connection)
    with connection.cursor() as cursor:
        cursor.execute(_allocate_sql(), [count, pk])
        row = cursor.fetchone()
    if row is None:
        raise Session.DoesNotExist(session_id)
    session = _SESSION.build(row[1:-1])
    session.is_root = bool(row[-1])
    return int(row[0]) - count + 1, session


def admit(session: Session, turn_id: Any) -> bool:
    """May ``turn_id`` (of ``session``, read by ``rtc_session``) create its RTC now? Call
    inside the creating transaction."""
    if session.root_session_id is None and not session.is_root:
        return True
    root = _root(session)
    member = f"{session.id}|{turn_id}|{session.user_id}"
    r = get_redis()
    with r.pipeline(transaction=False) as pipe:
        pipe.sadd(_key(root), member).expire(_key(root), WAITERS_TTL).execute()
    list(Session.objects.select_for_update().filter(pk=root).values_list("pk", flat=True))
    busy = (Rtc.objects.filter(Q(session_id=root) | Q(session__root_session_id=root))
            .exclude(status__in=TERMINAL_RTC_STATUSES).exclude(turn_id=turn_id).exists())
    if not busy:
        r.srem(_key(root), member)
    return not busy


def wake(session_id: Any, *, root: Any = None) -> None:
    """An RTC of ``session_id``'s tree ended: resume the turns waiting at the gate. ``root``:
    the tree's root session when the caller knows it (else it is read)."""
    from apps.turns.queue import enqueue_resume

    if root is None:
        row = Session.objects.filter(pk=session_id).values("id", "root_session_id").first()
        if row is None:
            return
        root = row["root_session_id"] or row["id"]
    with contextlib.suppress(redis.RedisError):
        r = get_redis()
        waiters = r.spop(_key(root), 1000) or []
        for member in waiters:
            sid, tid, uid = str(member).split("|")
            enqueue_resume(sid, tid, user_id=uid)


def wake_after_commit(session_id: Any, *, root: Any = None) -> None:
    transaction.on_commit(lambda: wake(session_id, root=root), robust=True)
