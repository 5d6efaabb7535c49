"""The loop scheduler, run by every worker (``tick`` from the worker's sweep, once a second).

Each call looks at the active loops that are due (``Loop.next_run_at <= now``) and runs the
latest due tick of each:

1. **Redis claim**: ``SET rtc:loop:{<loop id>}:tick:<k> NX PX LOOP_CLAIM_MS``. With several
   workers, only the one that sets the key goes on; the others skip the loop without touching
   the database. A worker that dies after claiming leaves the key to expire, and the tick is
   taken by the next worker after ``LOOP_CLAIM_MS``.
2. **Database, the truth**: ``apps.tasks.loops.loop_run_tick`` takes the tick with a conditional
   ``UPDATE`` and records it (``LoopRun`` is unique per tick) in the transaction that sends the
   message. Redis losing its keys (a restart, a flush) or being away therefore never runs a
   tick twice; without Redis every worker asks the database, which still lets one through.

Loops live in the database, so they survive restarts of workers and of Redis; the first tick
after a pause is the latest one due (missed ticks are not made up).

Each call also runs ``goals_sweep``: a goal whose session's latest completed turn was never
counted (its worker died between completing the turn and calling the hook) gets its round.
"""

from __future__ import annotations

import logging
import secrets
import threading
from datetime import datetime, timedelta

from django.db import close_old_connections, connection
from django.db.models import Exists, F, OuterRef, Q, Subquery
from django.utils import timezone

from apps.turns.models import ACTIVE_TURN_STATUSES, Turn, TurnStatus
from rtcagent.redis import get_redis

from .goals import goal_round
from .limits import task_setting
from .loops import loop_run_tick, tick_at
from .models import Goal, GoalStatus, Loop, LoopRunStatus, LoopStatus

log = logging.getLogger(__name__)

_TOKEN = secrets.token_hex(8)  # this process, in the claim keys' values (for debugging)


def tick_key(loop_id: object, tick: int) -> str:
    """The Redis key that claims tick ``tick`` of a loop."""
    return f"rtc:loop:{{{loop_id}}}:tick:{tick}"


def _claim(loop_id: object, tick: int) -> bool | None:
    """True: ours; False: another worker's; None: Redis is away (the database decides)."""
    try:
        return bool(get_redis().set(tick_key(loop_id, tick), _TOKEN, nx=True,
                                    px=int(task_setting("LOOP_CLAIM_MS"))))
    except Exception:
        log.warning("loop claim: Redis unavailable; the database decides alone", exc_info=True)
        return None


def _release(loop_id: object, tick: int) -> None:
    try:
        get_redis().delete(tick_key(loop_id, tick))
    except Exception:
        log.warning("loop claim: could not release %s", tick_key(loop_id, tick), exc_info=True)


def tick(now: datetime | None = None) -> int:
    """Run every due loop tick (at most ``LOOP_TICK_BATCH`` loops) and make up missed goal
    rounds; the number of loop messages sent."""
    now = now or timezone.now()
    sent = 0
    due = list(Loop.objects.filter(status=LoopStatus.ACTIVE, next_run_at__lte=now)
               .order_by("next_run_at")[: int(task_setting("LOOP_TICK_BATCH"))])
    for loop in due:
        k = tick_at(loop, now)
        if k < loop.next_tick or _claim(loop.id, k) is False:
            continue
        try:
            run = loop_run_tick(loop_id=loop.id, tick=k, now=now)
        except Exception:
            log.exception("loop %s: tick %d failed", loop.id, k)
            _release(loop.id, k)  # the transaction rolled back: the tick is free again
            continue
        sent += run is not None and run.status == LoopRunStatus.SENT
    try:
        goals_sweep(now)
    except Exception:
        log.exception("goal sweep failed")
    return sent


def run_forever(stopping: threading.Event, every: float = 1.0) -> None:
    """``tick`` every ``every`` seconds until ``stopping`` is set: the body of a worker's
    scheduler thread, so loops keep time while the worker's main loop is inside a long turn.
    A failing tick (database or Redis away) is logged and the next one tries again."""
    try:
        while not stopping.wait(every):
            close_old_connections()
            try:
                tick()
            except Exception:
                log.exception("loop scheduler tick failed")
    finally:
        connection.close()


def goals_sweep(now: datetime | None = None, *, limit: int = 100) -> int:
    """Count the rounds whose hook never ran: an active goal, its session idle (no open turn),
    and a turn completed after the goal, at least ``GOAL_SWEEP_QUIET`` seconds ago, that is
    not the goal's ``last_turn``. The number of goals that got a round."""
    now = now or timezone.now()
    quiet = now - timedelta(seconds=float(task_setting("GOAL_SWEEP_QUIET")))
    completed = (Turn.objects.filter(session_id=OuterRef("session_id"),
                                     status=TurnStatus.COMPLETED,
                                     completed_at__gte=OuterRef("created_at"))
                 .order_by("-completed_at", "-id"))
    open_turn = Turn.objects.filter(session_id=OuterRef("session_id"),
                                    status__in=ACTIVE_TURN_STATUSES)
    candidates = (
        Goal.objects.filter(status=GoalStatus.ACTIVE)
        .annotate(latest=Subquery(completed.values("id")[:1]),
                  latest_at=Subquery(completed.values("completed_at")[:1]))
        .filter(latest__isnull=False, latest_at__lte=quiet)
        .filter(Q(last_turn__isnull=True) | ~Q(last_turn_id=F("latest")))
        .exclude(Exists(open_turn))
        .values_list("latest", flat=True)[:limit]
    )
    done = 0
    for turn in Turn.objects.filter(pk__in=list(candidates)):
        if goal_round(turn=turn) is not None:
            done += 1
    return done
