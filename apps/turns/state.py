"""Per-turn state: the checkpoint and the cross-process stop signal.

PostgreSQL holds the truth, Redis the fast copy: Redis is never the only copy.

* **Checkpoint.** ``checkpoint_save`` writes the row (``TurnCheckpoint``) first, then Redis
  (TTL 24 h), so PostgreSQL is never behind Redis. ``checkpoint_load`` reads Redis and falls
  back to PostgreSQL when Redis has nothing (restarted empty, flushed, key expired), then puts
  the copy back into Redis. A save whose Redis copy must wait for a commit (the checkpoint
  stored in an RTC's transaction) drops Redis's copy before that transaction
  (``checkpoint_invalidate``). A Redis write that fails (``OOM command not allowed`` under
  ``maxmemory`` with ``noeviction``, or Redis away) is logged as an error, Redis's older copy is
  deleted, and ``CheckpointNotCached`` stops the turn: it stays ``running`` with its checkpoint in
  PostgreSQL, and the sweeper resumes it from there once Redis takes writes again. So Redis's
  copy is never newer than PostgreSQL's, and at worst one save older (when even the delete
  failed), which is what a crash just before that save leaves, and the engine repeats that
  step idempotently. A turn's end (``turn_transition`` to a terminal status) deletes the row in
  its transaction, so no ended turn is ever seen with one, and Redis's copy after the commit.
* **Stop.** ``request_stop`` stamps ``Turn.stop_requested_at``, then sets the Redis flag that the
  streaming worker polls five times a second. The poll stays on Redis (one round trip, both
  keys): only when Redis has no checkpoint for a turn that is running, i.e. it lost its data,
  does it ask PostgreSQL. A resumed turn whose row says stopped gets its flag back, and the
  check after a park asks PostgreSQL, so a stop is never undone by a Redis restart.

Cost: one upsert of the whole checkpoint per save. A browser tool call saves once, in its RTC's
transaction (``engine``: its result is stored with the next answer's call or dropped with the
turn's end); a server tool saves before and after it runs; never per streamed chunk. The
checkpoint carries the turn's transcript, so a turn of n tool calls writes O(n^2) bytes over
its life (bounded by ``engine.MAX_STEPS`` answers and ``MAX_RESULT_BYTES`` per result); large
values go to TOAST and the WAL like any other row. Loads hit PostgreSQL only when Redis lost
the key. A stop costs one UPDATE.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from typing import TYPE_CHECKING, Any

import redis
from django.db import connection
from django.utils import timezone

from apps.turns.models import Turn, TurnCheckpoint
from rtcagent.redis import get_redis

if TYPE_CHECKING:
    from apps.gateway.stream import Position, Reservation

log = logging.getLogger(__name__)

CHECKPOINT_TTL = 24 * 3600
STOP_TTL = 3600


class CheckpointNotCached(RuntimeError):
    """The checkpoint is in PostgreSQL but Redis refused its copy: the turn must pause."""


def _cp(turn_id: str) -> str:
    return f"rtc:turn:{{{turn_id}}}:checkpoint"


def _stop(turn_id: str) -> str:
    return f"rtc:turn:{{{turn_id}}}:stop"


def checkpoint_load(turn_id: str) -> dict[str, Any] | None:
    """The turn's checkpoint from Redis, else from PostgreSQL (copied back into Redis), else
    None: the turn has no checkpoint anywhere. ``CheckpointNotCached`` when PostgreSQL has it
    but Redis refuses the copy (the turn pauses before calling the model)."""
    raw = get_redis().get(_cp(turn_id))
    if raw:
        return json.loads(raw)
    data = TurnCheckpoint.objects.filter(turn_id=turn_id).values_list("data", flat=True).first()
    if data is None:
        return None
    log.info("checkpoint of turn %s restored from PostgreSQL (Redis had none)", turn_id)
    try:  # NX: never overwrite a copy written meanwhile
        get_redis().set(_cp(turn_id), json.dumps(data), ex=CHECKPOINT_TTL, nx=True)
    except redis.RedisError as exc:
        # Running on would call the model and then fail at the next save (Redis full or away),
        # once per sweep: pause here instead, before any model call, until Redis takes writes.
        log.error("could not copy the checkpoint of turn %s back into Redis (%s: %s); the turn "
                  "waits until Redis accepts writes", turn_id, type(exc).__name__, exc)
        raise CheckpointNotCached(turn_id) from exc
    return data


def checkpoint_save(turn_id: str, data: dict[str, Any]) -> None:
    """Store the checkpoint in PostgreSQL, then in Redis; ``CheckpointNotCached`` when Redis
    refused it (see the module docstring)."""
    checkpoint_store(turn_id, data)
    checkpoint_cache(turn_id, data)


def checkpoint_store(turn_id: str, data: dict[str, Any]) -> None:
    """The PostgreSQL half of ``checkpoint_save`` (inside the caller's transaction, if any):
    ``checkpoint_cache`` must follow once it is committed."""
    _store(turn_id, data, replace=True)


def checkpoint_store_first(turn_id: str, data: dict[str, Any]) -> None:
    """``checkpoint_store`` unless the turn has a checkpoint row already (then nothing)."""
    _store(turn_id, data, replace=False)


def _store(turn_id: str, data: dict[str, Any], *, replace: bool) -> None:
    """One hand-written upsert (every step of a turn stores one): the ORM's ``bulk_create``
    with its conflict clause cost three times the statement to compile."""
    sql, fields = _store_sql(replace)
    values = (turn_id, data, timezone.now())
    with connection.cursor() as cursor:
        cursor.execute(sql, [f.get_db_prep_save(v, connection)
                             for f, v in zip(fields, values, strict=True)])


@functools.cache
def _store_sql(replace: bool) -> tuple[str, list[Any]]:
    meta, q = TurnCheckpoint._meta, connection.ops.quote_name
    fields = [meta.get_field(name) for name in ("turn", "data", "saved_at")]
    turn, data, saved = (q(f.column) for f in fields)
    then = (f"DO UPDATE SET {data} = EXCLUDED.{data}, {saved} = EXCLUDED.{saved}" if replace
            else "DO NOTHING")
    return (f"INSERT INTO {q(meta.db_table)} ({turn}, {data}, {saved}) "  # noqa: S608
            f"VALUES (%s, %s, %s) ON CONFLICT ({turn}) {then}", fields)


def checkpoint_cache(turn_id: str, data: dict[str, Any]) -> None:
    """The Redis half of ``checkpoint_save``: ``CheckpointNotCached`` when Redis refused it."""
    r = get_redis()
    try:
        r.set(_cp(turn_id), json.dumps(data), ex=CHECKPOINT_TTL)
    except redis.RedisError as exc:
        log.error(
            "checkpoint of turn %s NOT written to Redis (%s: %s); it is safe in PostgreSQL. "
            "The turn pauses and is resumed from PostgreSQL once Redis accepts writes again "
            "(full? see maxmemory and maxmemory-policy noeviction)",
            turn_id, type(exc).__name__, exc,
        )
        with contextlib.suppress(redis.RedisError):  # DEL needs no memory: allowed when full
            r.delete(_cp(turn_id))
        raise CheckpointNotCached(turn_id) from exc


def checkpoint_invalidate(turn_id: str, *, also: tuple[str, ...] = ()) -> None:
    """Before a transaction that stores a newer checkpoint (``checkpoint_store``), whose Redis
    copy can only follow its commit: drop Redis's copy now, so that a crash between that commit
    and the copy leaves none (a load then reads PostgreSQL's) rather than an older one, which
    would repeat a step that is not idempotent (an answer whose call became an RTC: the model
    asked again might call something else). ``CheckpointNotCached`` when Redis refuses (the
    turn pauses before the transaction; DEL needs no memory, so a full Redis still takes it).
    ``also``: other keys to drop in the same round trip (the session's wake-up,
    ``Hold.wake_key``). ``invalidate_reserving`` does the same without waiting."""
    try:
        get_redis().delete(_cp(turn_id), *also)
    except redis.RedisError as exc:
        raise _not_dropped(turn_id, exc) from exc


def invalidate_reserving(turn_id: str, user_id: int, *, also: tuple[str, ...] = ()
                         ) -> Reservation:
    """``checkpoint_invalidate``, with the user's next topic offset reserved behind it in one
    packet, not waited for (``apps.gateway.stream.reserve``): the reservation, whose
    drop ``invalidated`` confirms before the transaction may commit."""
    from apps.gateway import stream

    try:
        return stream.reserve(user_id, [("DEL", _cp(turn_id), *also)])
    except redis.RedisError as exc:
        raise _not_dropped(turn_id, exc) from exc


def invalidated(turn_id: str, reservation: Reservation) -> Position:
    """Wait for ``invalidate_reserving``'s drop (``CheckpointNotCached`` when Redis refused or
    could not be reached); the reserved position."""
    try:
        reservation.replies()
        return reservation.position()
    except redis.RedisError as exc:
        raise _not_dropped(turn_id, exc) from exc


def _not_dropped(turn_id: str, exc: BaseException) -> CheckpointNotCached:
    log.error("checkpoint of turn %s: Redis's copy could not be dropped before a save "
              "(%s: %s); the turn waits until Redis takes writes", turn_id,
              type(exc).__name__, exc)
    return CheckpointNotCached(turn_id)


def checkpoint_delete(turn_id: str) -> None:
    """The turn ended: drop its checkpoint everywhere."""
    checkpoint_drop_row(turn_id)
    checkpoint_uncache(turn_id)


def checkpoint_drop_row(turn_id: str) -> None:
    """The PostgreSQL half of ``checkpoint_delete`` (inside the transaction that ends the turn,
    ``turn_transition``); ``checkpoint_uncache`` follows its commit."""
    TurnCheckpoint.objects.filter(turn_id=turn_id).delete()


def checkpoint_uncache(turn_id: str) -> None:
    """The Redis half of ``checkpoint_delete``."""
    get_redis().delete(_cp(turn_id))


def request_stop(turn_id: str) -> None:
    """Ask whichever process runs the turn to stop it (it polls while streaming)."""
    Turn.objects.filter(pk=turn_id, stop_requested_at__isnull=True).update(
        stop_requested_at=timezone.now()
    )
    get_redis().set(_stop(turn_id), "1", ex=STOP_TTL)


def raise_stop_flag(turn_id: str) -> None:
    """Only the Redis flag of ``request_stop``, at once (a live call's input raises it before
    its transaction, which records the stop in PostgreSQL too)."""
    get_redis().set(_stop(turn_id), "1", ex=STOP_TTL)


def stop_requested(turn_id: str, *, durable: bool = False, started: bool = True) -> bool:
    """True when a stop was requested. Redis answers, unless it holds no checkpoint of the
    turn (it lost its data, or could not take the copy back): then PostgreSQL does, and its
    answer is copied back. ``durable`` asks PostgreSQL whenever Redis has no flag (one query:
    for the decisions taken once per park, not for the poll). ``started=False``: the turn is
    pending, so it has no checkpoint anywhere; the flag alone answers (a stop of a pending
    turn cancels it in PostgreSQL, which its first write then finds)."""
    r = get_redis()
    if not started:
        return bool(r.exists(_stop(turn_id)))
    with r.pipeline(transaction=False) as pipe:
        flagged, cached = pipe.exists(_stop(turn_id)).exists(_cp(turn_id)).execute()
    if flagged or (cached and not durable):
        return bool(flagged)
    stopped = Turn.objects.filter(pk=turn_id, stop_requested_at__isnull=False).exists()
    if stopped:
        restore_stop(turn_id)
    return stopped


def restore_stop(turn_id: str) -> None:
    """Put a stop that PostgreSQL recorded back into Redis, where the streaming worker polls."""
    with contextlib.suppress(redis.RedisError):
        get_redis().set(_stop(turn_id), "1", ex=STOP_TTL)
