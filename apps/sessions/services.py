"""Writes to sessions and messages: one function per use case, each in one transaction.

Each action service validates, checks ownership (another user's session is ``NotFound``), writes
with conditional updates, and records its Update through ``apps.gateway.events.publish_update``
inside the same transaction, so the Update is published if and only if the change commits.
Services return the changed rows and the Updates; handlers shape the wire result.
"""

from __future__ import annotations

import functools
import math
import os
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from apps.attachments.validation import files_validate
from apps.gateway.events import item, publish_update
from apps.turns.models import ACTIVE_TURN_STATUSES, Turn, TurnStatus
from rtcagent.conf import rtc_setting
from rtcagent.errors import ClientIdConflict, InvalidRequest, InvalidState, NotFound, RateLimited
from rtcagent.returning import update_returning
from rtcagent.rows import batched, insert, later

from .models import (
    SESSION_TRANSITIONS,
    ContentType,
    Message,
    MessageRole,
    Session,
    SessionStatus,
    WorkMode,
)
from .selectors import (
    as_uuid,
    messages_before,
    session_get,
    visible_messages,
    visible_sessions,
    with_lineage,
)
from .serializers import message_to_dict, session_to_dict
from .statemachine import apply_transition

RESERVED_CLIENT_ID_PREFIX = "turn:"  # messages the engine writes (apps.turns.runner)
QUEUED_RETRY_AFTER = 5  # seconds: a hint; queued turns start one by one as workers get to them
FORK_LIMIT_DEFAULT = 200
FORK_LIMIT_MAX = 1000
TITLE_MAX = 255

_TEXT_TYPES = {ContentType.MARKDOWN, ContentType.TEXT, ContentType.THINKING}
_OBJECT_TYPES = {
    ContentType.TOOLCALL_INPUT,
    ContentType.TOOLCALL_OUTPUT,
    ContentType.USER_MESSAGE,
    ContentType.ERROR,
    ContentType.PROMPT,
}
USER_CONTENT_TYPES = frozenset({ContentType.USER_MESSAGE, ContentType.TEXT, ContentType.MARKDOWN})


@dataclass(frozen=True)
class SessionChange:
    """A session after an action, and the Updates it published (empty when nothing changed)."""

    session: Session
    updates: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class SessionFork:
    session: Session
    messages: list[Message]  # copies then the new user message, in global_offset order
    updates: list[dict[str, Any]]



def _session_row(pk: uuid.UUID) -> Session:
    """Session ``pk`` as Updates render it (its lineage attached only if it is a sub-agent)."""
    session = Session.objects.get(pk=pk)
    with_lineage([session])
    return session

def validate_content(content: Any, *, allowed: frozenset[str] | None = None) -> dict[str, Any]:
    """Check a message content ``{type, data}`` and return it; ``InvalidRequest`` otherwise.

    Text types carry a string, ``summary`` a list, the others an object (``user_message`` with a
    string ``text``). ``allowed`` narrows the accepted types.
    """
    if not isinstance(content, dict) or set(content) != {"type", "data"}:
        raise InvalidRequest("content_data: must be an object with exactly type and data")
    kind, data = content["type"], content["data"]
    if kind not in ContentType.values or (allowed is not None and kind not in allowed):
        raise InvalidRequest(f"content_data.type: {kind!r} is not accepted here")
    if kind in _TEXT_TYPES:
        ok = isinstance(data, str)
    elif kind == ContentType.SUMMARY:
        ok = isinstance(data, list)
    else:
        ok = isinstance(data, dict)
        if ok and kind == ContentType.USER_MESSAGE:
            ok = isinstance(data.get("text"), str)
    if not ok:
        raise InvalidRequest(f"content_data.data: wrong shape for type {kind}")
    return {"type": kind, "data": data}


def validate_files(*, user_id: Any, content: dict[str, Any]) -> None:
    """The ``files`` of a ``user_message`` (the original's ``FileAttachment``s): at most
    ``ATTACH_MAX_FILES``, each ``{fileid, mimetype, extra}`` with a safe key under the caller's
    own prefix ``user-<uuid>/``; ``InvalidRequest`` naming the entry otherwise. The objects are
    not read here: a missing one is skipped, with a warning, when the worker processes it."""
    data = content["data"]
    if content["type"] == ContentType.USER_MESSAGE and "files" in data:
        files_validate(user_id=user_id, files=data["files"])


def session_transition(
    *,
    session_id: uuid.UUID | str,
    to: str,
    user_id: int | None = None,
    only_from: Collection[str] | None = None,
) -> Session:
    """Move a session along ``SESSION_TRANSITIONS`` with one conditional UPDATE.

    Closing stamps ``closed_at``; entering idle clears it. With ``user_id`` the move is scoped to
    that owner's visible sessions; ``only_from`` narrows the allowed predecessors. Raises
    ``InvalidState`` (nothing changed) when the move is refused, ``NotFound`` when the session is
    not there. Publishes nothing: callers decide which Update the change belongs to.
    """
    pk = as_uuid(session_id, "session")
    scope: dict[str, Any] = {"deleted_at__isnull": True}
    if user_id is not None:
        scope["user_id"] = user_id
    values: dict[str, Any] = {}
    if to == SessionStatus.CLOSED:
        values["closed_at"] = timezone.now()
    elif to == SessionStatus.IDLE:
        values["closed_at"] = None
    apply_transition(
        Session,
        entity="session",
        pk=pk,
        to=to,
        table=SESSION_TRANSITIONS,
        scope=scope,
        values=values,
        only_from=only_from,
    )
    return _session_row(pk)


def _session_updated(session: Session) -> list[dict[str, Any]]:
    return [
        publish_update(
            user_id=session.user_id,
            items=[item("session", "updated", session.id)],
            data_list=[session_to_dict(session)],
        )
    ]


def session_open(*, user_id: int, session_id: uuid.UUID | str) -> SessionChange:
    """Reopen the caller's closed session (closed -> idle, ``closed_at`` cleared).

    Idempotent: a session that is not closed is returned unchanged with no Update.
    """
    with transaction.atomic():
        try:
            session = session_transition(
                session_id=session_id,
                to=SessionStatus.IDLE,
                user_id=user_id,
                only_from=(SessionStatus.CLOSED,),
            )
        except InvalidState:
            return SessionChange(session=session_get(user_id=user_id, session_id=session_id))
        return SessionChange(session=session, updates=_session_updated(session))


def session_close(*, user_id: int, session_id: uuid.UUID | str) -> SessionChange:
    """Close the caller's session (active/idle -> closed, ``closed_at`` stamped).

    Idempotent: closing a closed session changes nothing and publishes nothing.
    """
    with transaction.atomic():
        try:
            session = session_transition(
                session_id=session_id, to=SessionStatus.CLOSED, user_id=user_id
            )
        except InvalidState:
            return SessionChange(session=session_get(user_id=user_id, session_id=session_id))
        return SessionChange(session=session, updates=_session_updated(session))


def session_update(
    *,
    user_id: int,
    session_id: uuid.UUID | str,
    title: str | None = None,
    work_mode: str | None = None,
    deleted_at: datetime | None = None,
) -> SessionChange:
    """Change the title and/or work mode of the caller's session, or soft-delete it.

    ``None`` means "leave as is"; at least one field is required. A soft-deleted session (given
    ``deleted_at``, an aware datetime) disappears from every query; its Update still carries it,
    with ``deleted_at`` set, so clients drop it. Raises ``InvalidRequest`` on bad values.
    """
    changes: dict[str, Any] = {}
    if title is not None:
        if not isinstance(title, str) or len(title) > TITLE_MAX:
            raise InvalidRequest(f"title: must be a string of at most {TITLE_MAX} characters")
        changes["title"] = title
    if work_mode is not None:
        if work_mode not in WorkMode.values:
            raise InvalidRequest(f"work_mode: must be one of {', '.join(WorkMode.values)}")
        changes["work_mode"] = work_mode
    if deleted_at is not None:
        if not isinstance(deleted_at, datetime) or timezone.is_naive(deleted_at):
            raise InvalidRequest("deleted_at: must be a date-time with a time zone")
        changes["deleted_at"] = deleted_at
    if not changes:
        raise InvalidRequest("nothing to update: give title, work_mode or deleted_at")
    pk = as_uuid(session_id, "session")
    with transaction.atomic():
        changed = Session.objects.filter(pk=pk, user_id=user_id, deleted_at__isnull=True).update(
            updated_at=timezone.now(), **changes
        )
        if not changed:
            raise NotFound("session", pk)
        session = _session_row(pk)
        return SessionChange(session=session, updates=_session_updated(session))


def session_allocate_offsets(*, session_id: uuid.UUID | str, count: int = 1) -> int:
    """Reserve ``count`` consecutive ``global_offset`` values; returns the first.

    One ``UPDATE ... RETURNING`` on the session's counter (one round trip: it is on the path of
    every message): call it inside the transaction that inserts the messages, so the row lock
    serializes concurrent writers until that commit.
    """
    if count < 1:
        raise ValueError("count must be positive")
    pk = as_uuid(session_id, "session")
    table = connection.ops.quote_name(Session._meta.db_table)
    column = connection.ops.quote_name(Session._meta.get_field("last_message_offset").column)
    key = connection.ops.quote_name(Session._meta.pk.column)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET {column} = {column} + %s WHERE {key} = %s RETURNING {column}",  # noqa: S608 - names from the model, values bound
            [count, Session._meta.pk.get_db_prep_value(pk, connection)],
        )
        row = cursor.fetchone()
    if row is None:
        raise NotFound("session", pk)
    return int(row[0]) - count + 1


def session_notify(*, session_id: Any, user_id: int, client_id: str, text: str,
                   origin: dict[str, Any]) -> Message | None:
    """Tell a session's agent something on the server's behalf (a sub-agent's result, a live
    call handed back): a user message with ``origin``, which starts a turn like any other.

    Not subject to the user's caps (the server sends it, once): idempotent on ``client_id``
    (None when it was sent already), and None for a session deleted or closed (nobody to
    tell). Inside the caller's transaction if there is one; queued after commit."""
    from apps.turns.queue import enqueue_message

    session = Session.objects.filter(pk=session_id, deleted_at__isnull=True).first()
    if session is None or session.status == SessionStatus.CLOSED:
        return None
    try:
        with transaction.atomic():
            msg = Message.objects.create(
                session=session, user_id=user_id, client_id=client_id,
                global_offset=session_allocate_offsets(session_id=session.id),
                role=MessageRole.USER,
                content={"type": ContentType.USER_MESSAGE,
                         "data": {"text": text, "origin": origin}},
            )
            Session.objects.filter(pk=session.pk).update(updated_at=timezone.now())
            session = Session.objects.select_related("parent_session", "root_session").get(
                pk=session.pk)
            publish_update(
                user_id=user_id,
                items=[item("session", "updated", session.id), item("message", "created", msg.id)],
                data_list=[session_to_dict(session), message_to_dict(msg)],
            )
            transaction.on_commit(lambda: enqueue_message(session.id, msg.id, user_id=user_id),
                                  robust=True)
            return msg
    except IntegrityError:
        return None  # told already


def _conflict(user_id: int, client_id: str) -> ClientIdConflict:
    existing = Message.objects.filter(user_id=user_id, client_id=client_id).first()
    details = (
        {"session_id": str(existing.session_id), "message_id": str(existing.id)}
        if existing
        else None
    )
    return ClientIdConflict(f"client_id {client_id!r} already used", details=details)


def _limit_counts(user_id: int, since: datetime | None) -> tuple[int, int]:
    """Lock the user's row, then count their messages waiting for a turn and (``since`` not
    None) their turns created after ``since``.

    Written as SQL: it is on the path of every message, and Django spent about 3 ms of CPU
    building the two-subquery statement each time (a tenth of a send's cost in the benchmark's
    shared core); this is two short statements with nothing to compile. The lock comes first,
    in its own statement, so that the count's snapshot, taken after the lock is held, sees what
    the sends that held it before committed. Fork copies (``client_id`` empty) and the engine's
    own messages (``RESERVED_CLIENT_ID_PREFIX``) are history, not requests.
    """
    user_table = get_user_model()._meta.db_table
    lock = f"SELECT id FROM {user_table} WHERE id = %s"  # noqa: S608 - the model's own name
    if connection.features.has_select_for_no_key_update:
        lock += " FOR NO KEY UPDATE"  # never blocks other writers' foreign-key checks
    elif connection.features.has_select_for_update:
        lock += " FOR UPDATE"
    # Table names from the models; every value is bound.
    # Waiting: a message without its turn yet, or with its turn created but not started
    # (``message_send`` creates it pending); started: the others created since ``since``.
    counts = (
        f"SELECT (SELECT COUNT(*) FROM {Message._meta.db_table} m"  # noqa: S608
        f" JOIN {Session._meta.db_table} s ON s.id = m.session_id"
        " WHERE m.user_id = %s AND m.role = %s AND m.turn_id IS NULL"
        " AND m.deleted_at IS NULL AND s.deleted_at IS NULL"
        " AND m.client_id <> '' AND substr(m.client_id, 1, %s) <> %s)"
        f" + (SELECT COUNT(*) FROM {Turn._meta.db_table} t WHERE t.user_id = %s AND t.status = %s),"
        f" (SELECT COUNT(*) FROM {Turn._meta.db_table} t"
        " WHERE t.user_id = %s AND t.created_at > %s AND t.status <> %s AND %s)"
    )
    stamp = connection.ops.adapt_datetimefield_value(since or timezone.now())
    prefix = RESERVED_CLIENT_ID_PREFIX
    # in a batched send the lock goes with the count, in the same round trip (``rows.later``):
    # PostgreSQL runs them in order, and takes the count's snapshot once the lock is held
    later(lock, [user_id])
    with connection.cursor() as cursor:
        cursor.execute(counts, [user_id, MessageRole.USER, len(prefix), prefix,
                                user_id, TurnStatus.PENDING,
                                user_id, stamp, TurnStatus.PENDING, since is not None])
        queued, started = cursor.fetchone()
    return int(queued), int(started)


def _turn_may_start(session_id: uuid.UUID) -> bool:
    """Whether a message sent now to this session may have its turn at once, created with it:
    no turn of the session is open and no earlier message waits for its own (it would run
    first). Written as SQL for the same reason as ``_limit_counts``: every send asks."""
    sid = Message._meta.get_field("session").get_db_prep_value(session_id, connection)
    active = ", ".join(["%s"] * len(ACTIVE_TURN_STATUSES))
    sql = (
        f"SELECT EXISTS (SELECT 1 FROM {Turn._meta.db_table} t"  # noqa: S608 - model names
        f" WHERE t.session_id = %s AND t.status IN ({active}))"
        f" OR EXISTS (SELECT 1 FROM {Message._meta.db_table} m WHERE m.session_id = %s"
        " AND m.role = %s AND m.turn_id IS NULL AND m.deleted_at IS NULL AND m.client_id <> '')"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [sid, *ACTIVE_TURN_STATUSES, sid, MessageRole.USER])
        (busy,) = cursor.fetchone()
    return not busy


def turn_limits_check(*, user_id: int, client_id: str) -> None:
    """Refuse one more turn beyond the user's caps: ``RateLimited`` with details
    ``{retry_after: seconds, limit: "queued_turns" | "turns_per_hour", max}``.

    At most ``MAX_QUEUED_TURNS_PER_USER`` of the user's messages wait for their turn to start,
    and ``MAX_TURNS_PER_HOUR`` turns start in a sliding hour (queued ones count: each will
    start); 0 turns a cap off. Call it first in the sending transaction: it locks the user's row
    (``FOR NO KEY UPDATE``, which never blocks other writers' foreign-key checks), so two sends
    cannot both take the last slot, and a refusal leaves nothing written. A ``client_id`` that
    was used before is ``ClientIdConflict`` as usual (a resend learns its ids, never 429).
    """
    max_queued = int(rtc_setting("MAX_QUEUED_TURNS_PER_USER"))
    per_hour = int(rtc_setting("MAX_TURNS_PER_HOUR"))
    if not max_queued and not per_hour:
        return
    now = timezone.now()
    since = now - timedelta(hours=1)
    started = Turn.objects.filter(user_id=user_id, created_at__gt=since)
    queued, count = _limit_counts(user_id, since if per_hour else None)
    details: dict[str, Any] | None = None
    if max_queued and queued >= max_queued:
        details = {"retry_after": QUEUED_RETRY_AFTER, "limit": "queued_turns", "max": max_queued}
    elif per_hour:
        if count + queued >= per_hour:
            # A slot frees when the turn that puts the user at the cap leaves the hour.
            k = count + queued - per_hour
            wait = 3600.0
            if k < count:
                oldest = started.order_by("created_at").values_list("created_at", flat=True)[k]
                wait = (oldest + timedelta(hours=1) - now).total_seconds()
            details = {"retry_after": max(1, math.ceil(wait)), "limit": "turns_per_hour",
                       "max": per_hour}
    if details is None:
        return
    if client_id and Message.objects.filter(user_id=user_id, client_id=client_id).exists():
        raise _conflict(user_id, client_id)
    raise RateLimited(
        f"too many turns: at most {details['max']} {details['limit'].replace('_', ' ')}",
        details=details,
    )


def session_fork(
    *,
    user_id: int,
    device_id: str,
    old_session_id: uuid.UUID | str,
    old_message_id: uuid.UUID | str,
    new_client_session_id: str,
    new_client_message_id: str,
    content: dict[str, Any],
    limit: int = FORK_LIMIT_DEFAULT,
) -> SessionFork:
    """Start a new session from the history of one of the caller's sessions.

    Copies the at most ``limit`` (capped at 1000) most recent messages *before*
    ``old_message_id`` into a new idle session (offsets renumbered from 1, turns not copied,
    parent links remapped to the copies), then adds the user message ``content`` with
    ``client_id = new_client_message_id``. All in one transaction with one Update (the session
    and every message ``created``). A reused ``new_client_message_id`` is ``ClientIdConflict``
    and nothing is created; so is a fork beyond the caps of ``turn_limits_check``
    (``RateLimited``). The agent turn for the new message is started by a worker: the
    message is queued after commit (as for ``message.send``), which is why ``turn_id`` is "".
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidRequest("limit: must be a positive integer")
    limit = min(limit, FORK_LIMIT_MAX)
    content = validate_content(content, allowed=USER_CONTENT_TYPES)
    validate_files(user_id=user_id, content=content)
    if new_client_message_id.startswith(RESERVED_CLIENT_ID_PREFIX):
        raise InvalidRequest("new_client_message_id: the 'turn:' prefix is reserved")
    with transaction.atomic():
        turn_limits_check(user_id=user_id, client_id=new_client_message_id)
        old = session_get(user_id=user_id, session_id=old_session_id)
        anchor_pk = as_uuid(old_message_id, "message")
        anchor = visible_messages(user_id=user_id).filter(session=old, pk=anchor_pk).first()
        if anchor is None:
            raise NotFound("message", anchor_pk)
        sources = messages_before(session=old, global_offset=anchor.global_offset, limit=limit)
        new = Session.objects.create(
            user_id=user_id,
            client_session_id=new_client_session_id,
            title=old.title,
            work_mode=old.work_mode,
            device_id=device_id or old.device_id,
            agent_prompt=old.agent_prompt,
            status=SessionStatus.IDLE,
            last_message_offset=len(sources) + 1,
        )
        created = Message(
            session=new,
            user_id=user_id,
            client_id=new_client_message_id,
            global_offset=len(sources) + 1,
            role=MessageRole.USER,
            content=content,
        )
        try:
            with transaction.atomic():
                created.save(force_insert=True)
        except IntegrityError:
            raise _conflict(user_id, new_client_message_id) from None
        copies = [_copy(src, new, offset) for offset, src in enumerate(sources, start=1)]
        remap = {src.id: copy.id for src, copy in zip(sources, copies, strict=True)}
        for src, copy in zip(sources, copies, strict=True):
            copy.parent_message_id = remap.get(src.parent_message_id)
        Message.objects.bulk_create(copies)
        messages = [*copies, created]
        from apps.turns.queue import enqueue_message

        transaction.on_commit(
            lambda: enqueue_message(new.id, created.id, user_id=user_id), robust=True
        )
        update = publish_update(
            user_id=user_id,
            items=[item("session", "created", new.id)]
            + [item("message", "created", m.id) for m in messages],
            data_list=[session_to_dict(new)] + [message_to_dict(m) for m in messages],
        )
    return SessionFork(session=new, messages=messages, updates=[update])


def _copy(src: Message, session: Session, offset: int) -> Message:
    return Message(
        session=session,
        user_id=src.user_id,
        global_offset=offset,
        role=src.role,
        content=src.content,
        streaming_status=src.streaming_status,
        input_tokens=src.input_tokens,
        output_tokens=src.output_tokens,
        total_tokens=src.total_tokens,
        cached_tokens=src.cached_tokens,
        reasoning_tokens=src.reasoning_tokens,
    )


@dataclass(frozen=True)
class MessageSent:
    session: Session
    message: Message
    updates: list[dict[str, Any]]
    turn: Turn | None = None  # created with the message (pending), when nothing was ahead of it


def _title_from(content: dict[str, Any]) -> str:
    data = content["data"]
    text = data.get("text", "") if isinstance(data, dict) else str(data)
    return " ".join(text.split())[:60]


def message_send(
    *,
    user_id: int,
    device_id: str,
    content: dict[str, Any],
    client_id: str,
    client_session_id: str = "",
    server_session_id: uuid.UUID | str | None = None,
    agent_prompt: str | None = None,
    work_mode: str | None = None,
    host_functions: list[dict[str, Any]] | None = None,
) -> MessageSent:
    """Add a user message (creating the session when ``server_session_id`` is empty).

    Idempotent on ``client_id``: a reused one is ``ClientIdConflict`` whose details name the
    existing ``session_id`` and ``message_id``, and nothing is written. Beyond the user's caps
    (``turn_limits_check``) it is ``RateLimited`` and nothing is written either. The sending
    device becomes the session's executing device. ``agent_prompt`` is a snapshot taken when the
    session is created (as the original's AGENT.md); later sends never change it. The turn is
    run by a worker: after commit the message is queued behind any turn still running in the
    session, in order. When nothing is ahead of it (``_turn_may_start``), its turn is created
    here, ``pending``, in the same transaction and Update (the session made active), so that
    the worker starts at once on the model request; the turn moves to running with its first
    write (``DjangoTurnPorts.begin``). Otherwise the worker creates it when its time comes.
    """
    content = validate_content(content, allowed=USER_CONTENT_TYPES)
    validate_files(user_id=user_id, content=content)
    if not client_id:
        raise InvalidRequest("client_id: required")
    if client_id.startswith(RESERVED_CLIENT_ID_PREFIX):
        raise InvalidRequest("client_id: the 'turn:' prefix is reserved for the server")
    if work_mode is not None and work_mode not in WorkMode.values:
        raise InvalidRequest(f"work_mode: {work_mode!r} is not a work mode")
    if host_functions is not None:
        from apps.rtc.tools import validate_host_functions

        try:
            host_functions = validate_host_functions(host_functions)
        except ValueError as exc:
            raise InvalidRequest(f"host_functions: {exc}") from None
    # A reused client_id fails the message's insert (the unique constraint, which also orders
    # two sends racing with it); the whole transaction (or the caller's savepoint) is rolled
    # back before the existing message is looked up, so no savepoint of its own is needed
    # around the insert (two round trips on every send).
    send = functools.partial(
        _message_send, user_id=user_id, device_id=device_id, content=content,
        client_id=client_id, client_session_id=client_session_id,
        server_session_id=server_session_id, agent_prompt=agent_prompt, work_mode=work_mode,
        host_functions=host_functions,
    )
    try:
        return send(with_turn=True)
    except IntegrityError:
        _raise_client_id_conflict(user_id, client_id)
    # Another send of the session took the turn first (the one-open-turn constraint): this
    # message is sent again without its turn, and queues behind that one.
    try:
        return send(with_turn=False)
    except IntegrityError:
        _raise_client_id_conflict(user_id, client_id)
        raise


def _raise_client_id_conflict(user_id: int, client_id: str) -> None:
    """After a failed insert: ``ClientIdConflict`` when ``client_id`` was used before."""
    conflict = _conflict(user_id, client_id)
    if conflict.details is not None:
        raise conflict from None


def _message_send(
    *, user_id: int, device_id: str, content: dict[str, Any], client_id: str,
    client_session_id: str, server_session_id: uuid.UUID | str | None,
    agent_prompt: str | None, work_mode: str | None,
    host_functions: list[dict[str, Any]] | None, with_turn: bool,
) -> MessageSent:
    """``message_send``'s transaction (its arguments checked); ``with_turn``: create the turn
    too when nothing is ahead of the message."""
    from apps.turns.serializers import turn_to_dict

    # two round trips (``batched``): the BEGIN with the limit's lock and count, the inserts
    # with the COMMIT, whose IntegrityError ``message_send`` catches around the transaction
    with batched(), transaction.atomic():
        turn_limits_check(user_id=user_id, client_id=client_id)
        created = not server_session_id
        pk = None if created else as_uuid(server_session_id, "session")
        turn = None
        if with_turn and (created or _turn_may_start(pk)):
            turn = Turn(user_id=user_id, client_id=client_id, status=TurnStatus.PENDING)
        status = SessionStatus.ACTIVE if turn is not None else SessionStatus.IDLE
        if created:
            offset = 1  # the session's first message
            session = Session(
                user_id=user_id, client_session_id=client_session_id,
                title=_title_from(content), device_id=device_id,
                agent_prompt=agent_prompt or "", work_mode=work_mode or WorkMode.EDIT,
                status=status, host_functions=host_functions or [],
                last_message_offset=offset,
            )
            insert(session)  # the send's three inserts uncompiled (rtcagent.rows)
        else:
            # One statement finds the session, applies the send's changes, takes the
            # message's offset (the row stays locked until commit, which orders concurrent
            # senders) and reads back the snapshot the Update carries.
            changes: dict[str, Any] = {"updated_at": timezone.now(),
                                       "last_message_offset": F("last_message_offset") + 1}
            if turn is not None:
                changes["status"] = status
            if device_id:
                changes["device_id"] = device_id
            if work_mode is not None:
                changes["work_mode"] = work_mode
            if host_functions is not None:
                changes["host_functions"] = host_functions
            rows = update_returning(
                visible_sessions(user_id=user_id).filter(pk=pk).exclude(
                    status=SessionStatus.CLOSED), **changes)
            if not rows:
                session = session_get(user_id=user_id, session_id=pk)  # NotFound when not
                raise InvalidState(f"session {session.id} is closed; open it first")
            session = rows[0]
            offset = session.last_message_offset
        message = Message(
            session_id=session.id, user_id=user_id, client_id=client_id,
            global_offset=offset, role=MessageRole.USER, content=content,
        )
        items = [item("session", "created" if created else "updated", session.id),
                 item("message", "created", message.id)]
        data_list = [session_to_dict(session)]
        if turn is not None:  # both rows refer to each other: the message's key is known
            turn.session_id, turn.trigger_message_id = session.id, message.id
            message.turn_id = turn.id
        insert(message)  # a reused client_id fails: in message_send
        data_list.append(message_to_dict(message))
        if turn is not None:
            insert(turn)  # another open turn fails: in message_send
            items.append(item("turn", "created", turn.id))
            data_list.append(turn_to_dict(turn))
        update = publish_update(user_id=user_id, items=items, data_list=data_list)
        # robust: a failing callback before this one must not drop the turn (the sweeper
        # would still find the message, but only after RTC_ORPHAN_AFTER)
        turn_id = turn.id if turn is not None else None
        transaction.on_commit(
            lambda: _queue_turn(session.id, message.id, user_id=user_id, turn_id=turn_id),
            robust=True)
    return MessageSent(session=session, message=message, updates=[update], turn=turn)


def _queue_turn(session_id: Any, message_id: Any, *, user_id: int, turn_id: Any) -> None:
    """After a send's commit: queue its turn, then let a worker that the queue woke run
    first if it shares this core. Its model request is what the sender waits for; this
    thread's reply to the send is not."""
    from apps.turns.queue import enqueue_message

    enqueue_message(session_id, message_id, user_id=user_id, turn_id=turn_id)
    os.sched_yield()
