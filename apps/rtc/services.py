"""Writes to RTCs that belong to the data model: the forward-only status state machine.

``update_status`` / ``submit_result`` and the timeout sweep decide *when* an RTC moves; they move
it only through ``rtc_transition``, which guarantees that an RTC never goes backwards and that a
finished RTC (completed, failed, timeout, rejected) never changes again, so its result is
applied at most once even when two submissions race.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import redis
from django.db import connection, transaction
from django.utils import timezone

from apps.gateway.events import item, publish_update
from apps.sessions.models import Message, Session
from apps.sessions.selectors import as_uuid
from apps.sessions.statemachine import apply_transition
from rtcagent.errors import InvalidRequest, InvalidState, NotFound, PermissionDenied
from rtcagent.jsonsafety import check_json, scrub_nul
from rtcagent.returning import IfNull
from rtcagent.rows import Columns, batched, split

from . import tools
from .models import RTC_TRANSITIONS, TERMINAL_RTC_STATUSES, Rtc, RtcStatus
from .serializers import rtc_to_dict

log = logging.getLogger(__name__)


def rtc_transition(
    *,
    rtc_id: uuid.UUID | str,
    to: str,
    user_id: int | None = None,
    values: Mapping[str, Any] | None = None,
    session: Session | None = None,
) -> Rtc:
    """Move an RTC forward along ``RTC_TRANSITIONS`` with one conditional UPDATE; return it as
    the UPDATE left it, with ``session`` (its session's row, when the caller read it) attached.

    Stamps ``sent_at`` (sent), ``started_at`` (executing) the first time, ``completed_at`` on a
    terminal status. ``values`` (``result``, ``error_message``, ``client_id``) are written in the
    same UPDATE, so a result lands only together with the winning transition. Raises
    ``InvalidState`` and changes nothing when the move is refused; ``NotFound`` when the RTC (of
    ``user_id``, if given) is not there. Publishes nothing.
    """
    pk = as_uuid(rtc_id, "rtc")
    now = timezone.now()
    stamps: dict[str, Any] = dict(values or {})
    if to == RtcStatus.SENT:
        stamps["sent_at"] = IfNull(now)
    elif to == RtcStatus.EXECUTING:
        stamps["started_at"] = IfNull(now)
    elif to in TERMINAL_RTC_STATUSES:
        stamps["completed_at"] = now
    scope = {"user_id": user_id} if user_id is not None else None
    rtc = apply_transition(
        Rtc, entity="rtc", pk=pk, to=to, table=RTC_TRANSITIONS, scope=scope, values=stamps
    )
    if session is not None and session.pk == rtc.session_id:
        rtc.session = session
    return rtc


# --- the browser's side of an RTC: status, result, timeout ----------------------------------

_BROWSER_STATUSES = {RtcStatus.SENT, RtcStatus.EXECUTING, RtcStatus.REJECTED}


@dataclass(frozen=True)
class RtcChange:
    rtc: Rtc
    updates: list[dict[str, Any]] = field(default_factory=list)
    duplicate: bool = False


_PARTS = (
    Columns(Rtc, "r"),
    Columns(Session, "s", ("id", "user_id", "device_id", "root_session_id")),
    Columns(Message, "m", ("id", "session_id", "user_id", "client_id", "turn_id",
                           "turn_offset", "content")),
)


@functools.cache
def _owned_sql() -> str:
    rtc, session, message = _PARTS
    return (
        f"SELECT {rtc.sql()}, {session.sql()}, {message.sql()} "  # noqa: S608 - names from the models
        f"FROM {Rtc._meta.db_table} r JOIN {Session._meta.db_table} s ON s.id = r.session_id "
        f"LEFT JOIN {Message._meta.db_table} m ON m.id = r.message_id "
        "WHERE r.id = %s AND r.user_id = %s AND r.deleted_at IS NULL AND s.deleted_at IS NULL"
    )


def _owned(user_id: int, rtc_id: uuid.UUID | str) -> Rtc:
    """The caller's visible RTC (``owned_get``'s rule) with its session (the device check and
    the gate read it) and its call message (a result's message answers it: ``_result_ref``).

    One hand-written statement (``rtcagent.rows``): it is on the path of every result, and the
    ORM's three-table ``select_related`` cost ten times its run to compile and build."""
    key = as_uuid(rtc_id, "rtc")
    with connection.cursor() as cursor:
        cursor.execute(_owned_sql(), [Rtc._meta.pk.get_db_prep_value(key, connection), user_id])
        row = cursor.fetchone()
    if row is None:
        raise NotFound("rtc", key)
    rtc, session, message = split(row, _PARTS)
    rtc.session = session
    rtc.message = message
    return rtc


def _result_ref(rtc: Rtc, call_msg: Message | None, values: dict[str, Any]) -> str | None:
    """Before the move that finishes ``rtc``: the client id of the ``toolcall_output`` message
    to write with it (``_finish``), whose id then goes into ``values`` (the same UPDATE links
    it); None for an RTC of no turn's call (``call_msg``: its call message, read by
    ``_owned``)."""
    from apps.turns.runner import message_id, result_client_id

    ref = result_client_id(call_msg) if call_msg is not None and rtc.turn_id else None
    if ref is not None:
        values["output_message_id"] = message_id(ref)
    return ref


def _finish(rtc: Rtc, call_msg: Message | None, ref: str | None, output: str | None = None
            ) -> list[dict[str, Any]]:
    """Inside the transaction that finished ``rtc``: its result's message (``ref``, from
    ``_result_ref``), one Update for both, and the turn's resume after commit. The worker
    that goes on with the turn then writes nothing before it asks the model again."""
    from apps.sessions.serializers import message_to_dict
    from apps.turns.runner import write_result_message

    items: list[dict[str, Any]] = []
    data_list: list[dict[str, Any]] = []
    text = None
    if ref is not None and call_msg is not None:
        msg = write_result_message(rtc, call_msg, ref, output)
        text = msg.content["data"]["output"]
        items.append(item("message", "created", msg.id))
        data_list.append(message_to_dict(msg))
    items.append(item("rtc", "updated", rtc.id))
    data_list.append(rtc_to_dict(rtc))
    _resume_after_commit(rtc, text)
    return [publish_update(user_id=rtc.user_id, items=items, data_list=data_list)]


def _check_device(rtc: Rtc, device_id: str) -> None:
    owner = rtc.session.device_id
    if owner and device_id and owner != device_id:
        raise PermissionDenied("another device executes this session's tool calls")


def _published(rtc: Rtc) -> list[dict[str, Any]]:
    return [publish_update(user_id=rtc.user_id, items=[item("rtc", "updated", rtc.id)],
                           data_list=[rtc_to_dict(rtc)])]


def _resume_after_commit(rtc: Rtc, written: str | None = None) -> None:
    """After commit, the turn's resume, whose wake-up carries the finished RTC's outcome (a
    worker waiting in place goes on without reading it back); ``written``: the text of the
    result's message written with it (``_finish``)."""
    from apps.turns.queue import enqueue_resume, wake_outcome

    text = written if written is not None else tools.output_for_model(
        rtc.status, rtc.result, rtc.error_message)
    outcome = wake_outcome(rtc_id=rtc.id, status=rtc.status, text=text,
                           written=written is not None)
    transaction.on_commit(
        lambda: enqueue_resume(rtc.session_id, rtc.turn_id, user_id=rtc.user_id,
                               outcome=outcome),
        robust=True,
    )
    from apps.rtc.gate import wake_after_commit

    # a turn of its sub-agent tree may wait for the device
    wake_after_commit(rtc.session_id, root=rtc.session.root_session_id or rtc.session_id)


def rtc_update_status(
    *, user_id: int, rtc_id: uuid.UUID | str, status: str, client_id: str = "",
    reason: str = "", device_id: str = "",
) -> RtcChange:
    """The browser reports ``sent``, ``executing`` or ``rejected`` (with an optional reason).

    Statuses only move forward: a report that would go back (``sent`` after ``executing``) or
    touch a finished RTC is ``InvalidState`` and changes nothing; repeating the current status
    is a no-op (``duplicate``). ``executing`` is a claim: it stores ``client_id``, and a repeat
    with another ``client_id`` is ``InvalidState`` (another tab of the device runs the call),
    so of two claims exactly one is told to run it. A rejection resumes the turn,
    which tells the model ``[Tool Rejected] <reason>``.
    """
    if status not in _BROWSER_STATUSES:
        raise InvalidRequest("status: must be sent, executing or rejected")
    with transaction.atomic():
        rtc = _owned(user_id, rtc_id)
        _check_device(rtc, device_id)
        if rtc.status == status:
            if status == RtcStatus.EXECUTING and rtc.client_id != client_id:
                raise InvalidState(  # claimed by another caller (another tab)
                    f"rtc {rtc.id} is already executing, claimed by another client",
                    details={"status": rtc.status, "to": status},
                )
            return RtcChange(rtc=rtc, duplicate=True)  # a retried report (its reply was lost)
        values: dict[str, Any] = {}
        if status == RtcStatus.EXECUTING:
            values = {"client_id": client_id}
        elif status == RtcStatus.REJECTED:
            values = {"error_message": reason[:2000], "client_id": client_id}
        call_msg = rtc.message if rtc.message_id is not None else None
        ref = _result_ref(rtc, call_msg, values) if status == RtcStatus.REJECTED else None
        rtc = rtc_transition(rtc_id=rtc.id, to=status, user_id=user_id, values=values,
                             session=rtc.session)
        if status == RtcStatus.REJECTED:
            return RtcChange(rtc=rtc, updates=_finish(rtc, call_msg, ref))
        return RtcChange(rtc=rtc, updates=_published(rtc))


def rtc_submit_result(
    *, user_id: int, rtc_id: uuid.UUID | str, success: bool, result: Any = None,
    error: str = "", client_id: str = "", device_id: str = "",
) -> RtcChange:
    """Apply a tool's result once; a repeat returns the stored result and changes nothing.

    ``duplicate`` is true when the RTC was already finished by the same ``client_id`` (a
    retried delivery). Results are applied only to unfinished RTCs, by one conditional UPDATE,
    so of two racing submissions exactly one wins. The turn resumes after commit.
    """
    if success:
        result, refused = _acceptable_result(result)
        if refused:
            success, error = False, refused
    error = scrub_nul(error)
    to = RtcStatus.COMPLETED if success else RtcStatus.FAILED
    values: dict[str, Any] = {"client_id": client_id}
    if success:
        values["result"] = result
    else:
        values["error_message"] = (error or "the tool failed")[:10000]
    key = as_uuid(rtc_id, "rtc")
    # what the model is told, from the result as sent (``write_result_message``)
    text = tools.output_for_model(to, result, values.get("error_message", ""))
    offer = _offer_early(key, user_id=user_id, device_id=device_id, status=to, text=text)
    if offer is not None:
        # The worker that took the offer is runnable now, and its next model request is what
        # the user waits for; this commit is not (the worker writes nothing before it). On a
        # busy core, let that thread run first; elsewhere this returns at once.
        os.sched_yield()
    change: RtcChange | None = None
    try:
        with batched(), transaction.atomic():  # the message's and Update's inserts with commit
            rtc = _owned(user_id, key)
            _check_device(rtc, device_id)
            if rtc.status not in TERMINAL_RTC_STATUSES:
                call_msg = rtc.message if rtc.message_id is not None else None
                ref = _result_ref(rtc, call_msg, values)
                try:
                    rtc = rtc_transition(rtc_id=rtc.id, to=to, user_id=user_id, values=values,
                                         session=rtc.session)
                except InvalidState:
                    rtc = Rtc.objects.select_related("session").get(pk=rtc.id)
                else:
                    change = RtcChange(rtc=rtc, updates=_finish(rtc, call_msg, ref, text))
    except BaseException:
        if offer is not None:  # not applied: nothing of it was stored
            _withdraw_early(key, offer)
        raise
    if change is not None:  # committed
        return change
    if offer is not None:  # the RTC had finished: another result (or this one, before) stands
        _withdraw_early(key, offer)
    return RtcChange(rtc=rtc, duplicate=bool(client_id) and rtc.client_id == client_id)


def _offer_early(rtc_id: uuid.UUID, *, user_id: int, device_id: str, status: str, text: str
                 ) -> str | None:
    """Before the submit's transaction: the result as the model will see it, offered to the
    worker waiting in place for it (``apps.turns.queue.offer_result``), which may ask the model
    while this commits and shows nothing before the commit's wake-up confirms it. The offer's
    token, or None when no worker took it (none waits, the text is too long for a wake-up, or
    Redis failed: the commit's wake-up resumes the turn as before)."""
    from apps.turns import queue

    if len(text) > queue.WAKE_TEXT_MAX:
        return None
    token = secrets.token_hex(8)
    offer = {"token": token, "rtc": str(rtc_id), "user": user_id, "device": device_id,
             "status": status, "text": text}
    try:
        return token if queue.offer_result(rtc_id, offer) else None
    except redis.RedisError:
        log.warning("rtc %s: its result could not be offered early", rtc_id, exc_info=True)
        return None


def _withdraw_early(rtc_id: uuid.UUID, token: str) -> None:
    """The offered result was not applied (the submit failed, or the RTC had finished)."""
    from apps.turns import queue

    try:
        queue.withdraw_offer(rtc_id, token)
    except redis.RedisError:  # the worker then gives up on it when no commit confirms it
        log.warning("rtc %s: its early result could not be withdrawn", rtc_id, exc_info=True)


def _acceptable_result(result: Any) -> tuple[Any, str]:
    """The result to store, or a reason (for the model) why it cannot be kept.

    NUL characters (a binary file read as text) become U+FFFD rather than losing the result;
    a result nested too deep or larger than ``MAX_RESULT_BYTES`` fails the call with a message
    that tells the model what to do instead. Either way the submission is answered once, so
    the browser never retries it.
    """
    import orjson

    from rtcagent.conf import wire_limits

    try:
        check_json(result, what="result", allow_nul=True)
    except InvalidRequest as exc:
        return None, f"the tool's result was refused: {exc.message}"
    result = scrub_nul(result)
    size = len(orjson.dumps(result))
    limit = wire_limits()["max_result_bytes"]
    if size > limit:
        return None, (
            f"the tool's result was {size} bytes, over the limit of {limit} bytes; "
            "ask for a smaller part (a range of lines, a narrower search, a summary)"
        )
    return result, ""


def rtc_timeout(*, rtc_id: uuid.UUID | str) -> int:
    """An unfinished RTC past its deadline becomes ``timeout``; returns 1 if it did."""
    with transaction.atomic():
        try:
            rtc = rtc_transition(rtc_id=rtc_id, to=RtcStatus.TIMEOUT)
        except InvalidState:
            return 0
        _published(rtc)
        _resume_after_commit(rtc)
        return 1
