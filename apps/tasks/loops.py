"""Services of loops: create, stop, and run one tick.

A loop sends its prompt into its session as a user message every ``interval_seconds``, at most
``max_runs`` times. Tick ``k`` is due at ``anchor_at + k * interval``; ``loop_run_tick`` takes
a tick with one conditional ``UPDATE`` (``next_tick <= k`` -> ``k + 1``) and records it as a
``LoopRun`` (unique per tick) in the same transaction, so with any number of workers and
restarts a tick runs at most once. Ticks missed while no worker ran are not made up: the next
tick run is the latest one due.

A due tick is *skipped* (recorded, not counted in ``runs``) while the loop's previous message
still waits for its turn (runs never pile up behind a long turn) or when the user is at their
turn caps. A loop whose session was closed or deleted stops. Every change publishes the
``loop`` entity in the same transaction.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.gateway.events import item, publish_update
from apps.sessions.models import Message, Session, SessionStatus
from apps.sessions.selectors import session_get, waiting_for_turn
from apps.sessions.statemachine import apply_transition
from rtcagent.errors import InvalidRequest, InvalidState, NotFound, RateLimited

from .limits import task_setting
from .models import LOOP_TRANSITIONS, Loop, LoopRun, LoopRunStatus, LoopStatus
from .selectors import loop_get
from .sending import NewSession, send_prompt
from .serializers import loop_to_dict


@dataclass(frozen=True)
class LoopChange:
    """A loop after an action, and the Updates it published (empty when nothing changed)."""

    loop: Loop
    updates: list[dict[str, Any]] = field(default_factory=list)


def _publish(loop: Loop, action: str) -> dict[str, Any]:
    return publish_update(user_id=loop.user_id, items=[item("loop", action, loop.id)],
                          data_list=[loop_to_dict(loop)])


def _int_in(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidRequest(f"{name}: must be an integer from {low} to {high}")
    return value


def check_loop(prompt: Any, interval_seconds: Any, max_runs: Any) -> tuple[str, int, int]:
    """The prompt (stripped), interval and max_runs (the default when ``None``), or
    ``InvalidRequest`` naming the first bad one."""
    limit = int(task_setting("LOOP_PROMPT_MAX_CHARS"))
    if not isinstance(prompt, str) or not prompt.strip():
        raise InvalidRequest("prompt: required")
    prompt = prompt.strip()
    if len(prompt) > limit:
        raise InvalidRequest(f"prompt: at most {limit} characters ({len(prompt)} given)")
    interval = _int_in("interval_seconds", interval_seconds,
                       int(task_setting("LOOP_MIN_INTERVAL_SECONDS")),
                       int(task_setting("LOOP_MAX_INTERVAL_SECONDS")))
    if max_runs is None:
        max_runs = int(task_setting("LOOP_DEFAULT_MAX_RUNS"))
    runs = _int_in("max_runs", max_runs, 1, int(task_setting("LOOP_MAX_RUNS")))
    return prompt, interval, runs


def loop_create(
    *, user_id: int, session_id: uuid.UUID | str | None, prompt: str, interval_seconds: int,
    max_runs: int | None = None, run_now: bool = True, new_session: NewSession | None = None,
) -> LoopChange:
    """Create a loop in the caller's session. With ``run_now`` (the user's ``/loop``) tick 0 is
    due at once; without (the agent, which has just done the work) the first run is one
    interval away. Without ``session_id`` (a ``/loop`` typed in a new conversation) tick 0's
    message creates the session as ``new_session`` says. Refused with ``InvalidRequest`` (bad
    values, or the user already has ``LOOP_MAX_ACTIVE_PER_USER`` active loops),
    ``InvalidState`` (closed session), ``NotFound`` or ``RateLimited`` (a first message beyond
    the user's caps); a refusal writes nothing."""
    prompt, interval, max_runs = check_loop(prompt, interval_seconds, max_runs)
    if session_id is None and new_session is None:
        raise InvalidRequest("session_id: required (or what creates a new session)")
    with transaction.atomic():
        session = None
        if session_id is not None:
            session = session_get(user_id=user_id, session_id=session_id)
            if session.status == SessionStatus.CLOSED:
                raise InvalidState(f"session {session.id} is closed; open it first")
        _check_active_loops(user_id)
        now = timezone.now()
        if session is None:
            return _loop_in_new_session(user_id=user_id, prompt=prompt, interval=interval,
                                        max_runs=max_runs, now=now, new_session=new_session)
        first = 0 if run_now else 1
        loop = Loop.objects.create(
            session=session, user_id=user_id, prompt=prompt, interval_seconds=interval,
            max_runs=max_runs, anchor_at=now, next_tick=first,
            next_run_at=now + timedelta(seconds=interval * first),
        )
        return LoopChange(loop=loop, updates=[_publish(loop, "created")])


def _check_active_loops(user_id: int) -> None:
    cap = int(task_setting("LOOP_MAX_ACTIVE_PER_USER"))
    # Counted under a lock on the user's row (taken first, as message_send takes it): two
    # creates cannot both take the last slot.
    list(get_user_model().objects.select_for_update(no_key=True).filter(pk=user_id)
         .values_list("pk", flat=True))
    if Loop.objects.filter(user_id=user_id, status=LoopStatus.ACTIVE).count() >= cap:
        raise InvalidRequest(f"too many loops: at most {cap} active loops; stop one first")


def _loop_in_new_session(
    *, user_id: int, prompt: str, interval: int, max_runs: int, now: datetime,
    new_session: NewSession | None,
) -> LoopChange:
    """Tick 0 is run here: its message creates the session."""
    loop_id = uuid.uuid4()
    sent = send_prompt(user_id=user_id, session_id=None, text=prompt,
                       client_id=f"loop:{loop_id}:0", new_session=new_session,
                       origin={"kind": "loop", "id": str(loop_id), "tick": 0})
    done = max_runs == 1
    loop = Loop.objects.create(
        id=loop_id, session=sent.session, user_id=user_id, prompt=prompt,
        interval_seconds=interval, max_runs=max_runs, runs=1, anchor_at=now, next_tick=1,
        next_run_at=None if done else now + timedelta(seconds=interval), last_run_at=now,
        status=LoopStatus.FINISHED if done else LoopStatus.ACTIVE,
    )
    LoopRun.objects.create(loop=loop, tick=0, status=LoopRunStatus.SENT, message=sent.message,
                           due_at=now)
    return LoopChange(loop=loop, updates=[*sent.updates, _publish(loop, "created")])


def _stop(loop: Loop, reason: str) -> Loop:
    apply_transition(Loop, entity="loop", pk=loop.pk, to=LoopStatus.STOPPED,
                     table=LOOP_TRANSITIONS,
                     values={"next_run_at": None, "stop_reason": reason[:255]})
    return Loop.objects.get(pk=loop.pk)


def loop_stop(*, user_id: int, loop_id: uuid.UUID | str, reason: str = "stopped") -> LoopChange:
    """Stop the caller's loop: no tick runs after this commits (a tick taken before it still
    sends its message). Idempotent: a loop that already ended is returned unchanged with no
    Update. ``NotFound('loop')`` for a loop that is not the caller's."""
    with transaction.atomic():
        loop = loop_get(user_id=user_id, loop_id=loop_id)
        try:
            loop = _stop(loop, reason)
        except InvalidState:
            return LoopChange(loop=Loop.objects.get(pk=loop.pk))
        return LoopChange(loop=loop, updates=[_publish(loop, "updated")])


def tick_due_at(loop: Loop, tick: int) -> datetime:
    return loop.anchor_at + timedelta(seconds=loop.interval_seconds * tick)


def tick_at(loop: Loop, now: datetime) -> int:
    """The latest tick of ``loop`` due at ``now`` (-1 before the first)."""
    elapsed = (now - loop.anchor_at).total_seconds()
    return int(elapsed // loop.interval_seconds) if elapsed >= 0 else -1


def _previous_waits(loop: Loop) -> bool:
    """The loop's latest message has not started its turn yet (it has none yet, or the one
    created with it is still pending)."""
    last = (LoopRun.objects.filter(loop=loop, status=LoopRunStatus.SENT)
            .order_by("-tick").values_list("message_id", flat=True).first())
    return bool(last) and waiting_for_turn(
        Message.objects.filter(pk=last, deleted_at__isnull=True)).exists()


def loop_run_tick(*, loop_id: uuid.UUID | str, tick: int, now: datetime | None = None
                  ) -> LoopRun | None:
    """Run tick ``tick`` of the loop if it is due and not taken: send the prompt (or skip, or
    stop the loop when its session is gone) and record the ``LoopRun``. ``None`` when the tick
    was not this caller's to run (not due, taken by another worker, loop ended)."""
    now = now or timezone.now()
    with transaction.atomic():
        loop = Loop.objects.filter(pk=loop_id, status=LoopStatus.ACTIVE).first()
        if loop is None or tick < 0 or tick_due_at(loop, tick) > now:
            return None
        # The claim: the row stays locked until commit, so a second claimer of this tick waits
        # here and then finds next_tick past it.
        taken = Loop.objects.filter(pk=loop.pk, status=LoopStatus.ACTIVE,
                                    next_tick__lte=tick).update(
            next_tick=tick + 1, next_run_at=tick_due_at(loop, tick + 1), updated_at=now)
        if not taken:
            return None
        status, reason, message, stop = _send(loop, tick)
        run = LoopRun.objects.create(loop=loop, tick=tick, status=status, reason=reason,
                                     message=message, due_at=tick_due_at(loop, tick))
        if status == LoopRunStatus.SENT:
            Loop.objects.filter(pk=loop.pk).update(runs=F("runs") + 1, last_run_at=now)
        loop = Loop.objects.get(pk=loop.pk)
        if stop:
            loop = _stop(loop, stop)
        elif loop.runs >= loop.max_runs:
            apply_transition(Loop, entity="loop", pk=loop.pk, to=LoopStatus.FINISHED,
                             table=LOOP_TRANSITIONS, values={"next_run_at": None})
            loop = Loop.objects.get(pk=loop.pk)
        _publish(loop, "updated")
        return run


def _send(loop: Loop, tick: int) -> tuple[str, str, Message | None, str]:
    """``(status, reason, message, stop reason)`` of one due tick."""
    session = Session.objects.filter(pk=loop.session_id).first()
    if session is None or session.deleted_at is not None:
        return LoopRunStatus.SKIPPED, "the session was deleted", None, "the session was deleted"
    if session.status == SessionStatus.CLOSED:
        return LoopRunStatus.SKIPPED, "the session is closed", None, "the session was closed"
    if _previous_waits(loop):
        return LoopRunStatus.SKIPPED, "the previous run has not started yet", None, ""
    try:
        with transaction.atomic():
            sent = send_prompt(
                user_id=loop.user_id, session_id=loop.session_id, text=loop.prompt,
                client_id=f"loop:{loop.id}:{tick}",
                origin={"kind": "loop", "id": str(loop.id), "tick": tick},
            )
    except RateLimited as exc:
        return LoopRunStatus.SKIPPED, exc.message[:255], None, ""
    except (InvalidState, NotFound) as exc:  # closed or deleted since we looked
        return LoopRunStatus.SKIPPED, exc.message[:255], None, exc.message
    return LoopRunStatus.SENT, "", sent.message, ""
