"""Offsets and epochs of each user's topic stream (``topic:u=<id>``).

Invariants:

* Offsets of one epoch are allocated by one Redis script (``INCR``), so they are unique and
  dense across every web and worker process. The allocation also records the offset in a
  "pending" sorted set with its time; the offset leaves that set once its row is known to be
  committed (after-commit hook) or once it was filled with a gap.
* The epoch lives in Redis next to the counter. If Redis loses them (flushed, restarted empty),
  the next allocation or read creates a new random epoch with the counter at 0, so a client
  holding the old epoch can never be told it "recovered" from an unrelated history.
* A row is in PostgreSQL before anyone is told about its offset. An allocation whose transaction
  rolled back leaves a hole; ``fill_gaps`` turns allocations older than ``GAP_GRACE`` into ``gap``
  rows. The unique index on (user, epoch, offset) makes that insert wait for a transaction that
  is still committing the real row, and lose to it, so a gap never hides a real publication.
* The *watermark* is the highest offset below which every offset is committed or filled:
  ``min(pending) - 1``, or the counter when nothing is pending. Connections start live delivery
  from it, so they never skip an offset that is still in flight.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from rtcagent import keys
from rtcagent.conf import rtc_setting
from rtcagent.redis import Sent, get_redis

from . import livebus
from .models import TopicEvent

log = logging.getLogger(__name__)

# KEYS: epoch, offset, pending, pending-users. ARGV: candidate epoch, (unused), user id, allocate
_POSITION_LUA = """
local epoch = redis.call('GET', KEYS[1])
if not epoch then
  epoch = ARGV[1]
  redis.call('SET', KEYS[1], epoch)
  redis.call('DEL', KEYS[2], KEYS[3])
end
local off
if ARGV[4] == '1' then
  off = redis.call('INCR', KEYS[2])
  local now = redis.call('TIME')  -- Redis's clock: writers' and fillers' clocks may differ
  redis.call('ZADD', KEYS[3], tonumber(now[1]) + tonumber(now[2]) / 1e6, off)
  redis.call('SADD', KEYS[4], ARGV[3])
else
  off = tonumber(redis.call('GET', KEYS[2]) or '0')
end
local low = redis.call('ZRANGE', KEYS[3], 0, 0)
local mark = off
if ARGV[4] ~= '1' and #low > 0 then mark = tonumber(low[1]) - 1 end
return {epoch, off, mark}
"""


# KEYS: epoch, offset, pending, pending-users. ARGV: epoch, offset, user id, seconds. The offset
# was the last one allocated, less than ``seconds`` ago by Redis's clock: taken back, as if it
# had never been (1); else 0. ``fill_gaps`` only fills offsets older than ``GAP_GRACE``, so one
# younger than that was never seen by a filler, and no row can exist for it.
_GIVE_BACK = """
local score = redis.call('ZSCORE', KEYS[3], ARGV[2])
if not score or redis.call('GET', KEYS[1]) ~= ARGV[1]
    or redis.call('GET', KEYS[2]) ~= ARGV[2] then return 0 end
local now = redis.call('TIME')
if tonumber(now[1]) + tonumber(now[2]) / 1e6 - tonumber(score) >= tonumber(ARGV[4]) then
  return 0
end
redis.call('DECR', KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[2])
if redis.call('ZCARD', KEYS[3]) == 0 then redis.call('SREM', KEYS[4], ARGV[3]) end
return 1
"""


# KEYS: pending, pending-users. ARGV: user id. Atomic, so a concurrent allocation is never lost.
_FORGET_IF_SETTLED = """
if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('SREM', KEYS[2], ARGV[1]) end
return 1
"""


@dataclass(frozen=True)
class Position:
    epoch: str
    offset: int  # the counter: highest offset allocated in this epoch
    watermark: int  # every offset <= watermark is committed (or filled with a gap)
    at: float = 0.0  # an allocation's: this process's monotonic clock before it was asked


def _position_script(user_id: int, allocate: bool) -> tuple[Any, ...]:
    """``EVAL``'s arguments of the position script for one user."""
    return (_POSITION_LUA, 4, keys.topic_epoch(user_id), keys.topic_offset(user_id),
            keys.topic_pending(user_id), keys.topic_pending_users(), secrets.token_hex(6), "",
            str(user_id), "1" if allocate else "0")


def _position(reply: Any) -> Position:
    epoch, off, mark = reply
    return Position(epoch=str(epoch), offset=int(off), watermark=int(mark))


def _run_position_script(user_id: int, allocate: bool) -> Position:
    return _position(get_redis().eval(*_position_script(user_id, allocate)))


def positions(user_ids: list[int]) -> dict[int, Position]:
    """``position`` of many users in one round trip (a pipeline of the same script)."""
    pipe = get_redis().pipeline(transaction=False)
    for uid in user_ids:
        pipe.eval(*_position_script(uid, False))
    return {uid: _position(reply)
            for uid, reply in zip(user_ids, pipe.execute(), strict=True)}


def allocate(user_id: int) -> Position:
    """Take the next offset of the user's topic (``Position.offset``)."""
    at = time.monotonic()
    return dataclasses.replace(_run_position_script(user_id, allocate=True), at=at)


class Reservation:
    """A topic offset asked for (``reserve``) and not read yet: ``position`` reads it."""

    def __init__(self, user_id: int, before: list[tuple[Any, ...]]) -> None:
        self.user_id = user_id
        self._at = time.monotonic()
        self._sent = Sent([*before, ("EVAL", *_position_script(user_id, True))])
        self._position: Position | None = None

    def replies(self) -> list[Any]:
        """The replies of ``before``'s commands (waits for them, with the offset's)."""
        return self._sent.replies()[:-1]

    def position(self) -> Position:
        """The reserved offset (waits for Redis's reply the first time)."""
        if self._position is None:
            reply = self._sent.replies()[-1]
            self._position = dataclasses.replace(_position(reply), at=self._at)
        return self._position


def reserve(user_id: int, before: list[tuple[Any, ...]] | None = None) -> Reservation:
    """Ask Redis for the user's next topic offset without waiting for the answer, behind the
    commands ``before`` (raw, such as ``("DEL", key)``), in one packet: the round trip overlaps
    the caller's first PostgreSQL statement. The offset is the caller's to publish
    (``store(position=reservation.position())``), or to give back (``release``, with the
    reservation or its position) when it publishes nothing: until then the user's watermark
    waits on it. Whoever reserves reads the answer, on every path (``position``, ``release``).
    Raises ``redis.RedisError`` when Redis cannot be reached."""
    return Reservation(user_id, list(before or ()))


def release(user_id: int, pos: Position | Reservation) -> None:
    """Give back an offset of ``reserve`` that was never published (its transaction rolled
    back, or had nothing to say), so the user's later publications are not held behind it
    until ``GAP_GRACE``: taken back in Redis when it is still the last one allocated and
    younger than ``GAP_GRACE / 2`` (nothing written), else filled with a gap now, inside a
    caller's transaction at its commit (rolled back, the gap filler fills it). Best effort: a
    failure (the offset never read) leaves it to ``fill_gaps``."""
    try:
        pos = pos.position() if isinstance(pos, Reservation) else pos
    except Exception:
        log.warning("topic offset of user %s: not read; the gap filler will settle it",
                    user_id, exc_info=True)
        return
    try:
        if get_redis().eval(_GIVE_BACK, 4, keys.topic_epoch(user_id), keys.topic_offset(user_id),
                            keys.topic_pending(user_id), keys.topic_pending_users(), pos.epoch,
                            pos.offset, user_id, rtc_setting("GAP_GRACE") / 2):
            return
    except Exception:
        log.warning("topic offset %s/%s: not taken back; filling it", user_id, pos.offset,
                    exc_info=True)
    if connection.in_atomic_block:
        transaction.on_commit(lambda: _fill(user_id, pos), robust=True)
    else:
        _fill(user_id, pos)


def _fill(user_id: int, pos: Position) -> None:
    try:
        TopicEvent.objects.bulk_create(
            [TopicEvent(user_id=user_id, epoch=pos.epoch, offset=pos.offset,
                        kind=TopicEvent.Kind.GAP)], ignore_conflicts=True)
        ring(TopicEvent.objects.get(user_id=user_id, epoch=pos.epoch, offset=pos.offset))
        livebus.sync()  # settled before this returns, as ``fill_gaps``'s
    except Exception:
        log.exception("topic offset %s/%s: releasing it failed; the gap filler will",
                      user_id, pos.offset)


def position(user_id: int, *, after: Callable[[Any], None] | None = None) -> Position:
    """Current epoch, counter and committed watermark (creates the epoch if Redis lost it).

    ``after`` queues commands on the same pipeline ahead of the read (one round trip): the
    connect's group joins (``apps.gateway.groups.sync_joiner``)."""
    if after is None:
        return _run_position_script(user_id, allocate=False)
    pipe = get_redis().pipeline(transaction=False)
    after(pipe)
    pipe.eval(*_position_script(user_id, False))
    return _position(pipe.execute()[-1])


def store(user_id: int, data: dict[str, Any], position: Position | None = None) -> TopicEvent:
    """Allocate an offset and insert the row, inside the caller's transaction.

    ``data`` (an Update) gets its ``offset`` key set to the allocated offset. ``position``:
    one ``reserve`` took already, used first.

    On the rare race where a slow transaction's offset was already filled with a gap, a fresh
    offset is taken instead of failing the caller's transaction: the insert is
    ``ON CONFLICT DO NOTHING RETURNING``, which returns no row then and leaves the transaction
    usable. (The ORM's insert needed a savepoint for that: two more round trips per Update, and
    every write of the turn path publishes one.)

    In a batched transaction (``rtcagent.rows.batched``) the row goes with the ``COMMIT``
    instead, one round trip fewer on every hot path (``_store_at_commit``).
    """
    if getattr(connection, "batching", False) and connection.in_atomic_block:
        return _store_at_commit(user_id, data, position)
    for _ in range(5):
        pos, position = position or allocate(user_id), None
        event, sql, values = _row(user_id, data, pos)
        with connection.cursor() as cursor:
            cursor.execute(sql, values)
            row = cursor.fetchone()
        if row is None:
            log.warning("topic offset %s/%s was filled before its row; retrying", user_id, pos)
            continue
        event.id = row[0]
        transaction.on_commit(lambda e=event: ring(e), robust=True)
        return event
    raise RuntimeError("could not allocate a topic offset")


def _store_at_commit(user_id: int, data: dict[str, Any], pos: Position | None) -> TopicEvent:
    """``store`` in a batched transaction: the insert (``ON CONFLICT DO NOTHING``, no
    ``RETURNING``) is held and goes with the ``COMMIT``, so nobody learns here whether a gap
    took the offset first. A gap can only take an offset allocated ``GAP_GRACE`` ago
    (``fill_gaps``, by Redis's clock); so when the commit came sooner than half that after the
    allocation began (by this process's monotonic clock), the row is ours, and it is rung as
    usual. Later than that (a stalled transaction), the row is read back after the commit;
    when it is a gap, the Update is stored again under a fresh offset (``_republish``), as
    ``store`` would have retried. The row's ``id`` stays unset (nothing reads it)."""
    pos = pos or allocate(user_id)
    event, sql, values = _row(user_id, data, pos, returning=False)
    with connection.cursor() as cursor:
        cursor.execute(sql, values)  # held until the next statement, at the latest the COMMIT
    transaction.on_commit(lambda: _ring_stored(event, pos.at), robust=True)
    return event


def _row(user_id: int, data: dict[str, Any], pos: Position, *, returning: bool = True
         ) -> tuple[TopicEvent, str, list[Any]]:
    """The row of ``data`` at ``pos`` (its ``offset`` key set), and its insert with values."""
    sql, fields = _insert_sql(returning=returning)
    data["offset"] = pos.offset
    event = TopicEvent(user_id=user_id, epoch=pos.epoch, offset=pos.offset, data=data,
                       created_at=timezone.now())
    return event, sql, [field.get_db_prep_save(getattr(event, field.attname), connection)
                        for field in fields]


def _ring_stored(event: TopicEvent, began: float) -> None:
    """After a ``_store_at_commit`` commit: ring the row, or store the Update again when a gap
    took its offset (checked only after a slow commit, see ``_store_at_commit``)."""
    if time.monotonic() - began >= rtc_setting("GAP_GRACE") / 2:
        kind = (TopicEvent.objects.filter(user_id=event.user_id, epoch=event.epoch,
                                          offset=event.offset)
                .values_list("kind", flat=True).first())
        if kind == TopicEvent.Kind.GAP:
            log.warning("topic offset %s/%s was filled before its row; storing it again",
                        event.user_id, event.offset)
            # its filler rang the gap; rung again (settled) in case that bell was lost
            ring(TopicEvent(user_id=event.user_id, epoch=event.epoch, offset=event.offset,
                            kind=TopicEvent.Kind.GAP))
            _republish(event)
            return
    ring(event)


def _republish(event: TopicEvent) -> None:
    """Store ``event``'s Update again under a fresh offset, in a transaction of its own (run
    from the commit's hook: checked and rung as any other)."""
    with transaction.atomic():
        store(event.user_id, event.data)  # its ``offset`` key becomes the new one


@functools.cache
def _insert_sql(*, returning: bool = True) -> tuple[str, list[Any]]:
    """``store``'s insert and the fields whose values it binds, in order (names from the
    model's metadata); ``returning``: with ``RETURNING`` its id (a conflict returns no row)."""
    meta, q = TopicEvent._meta, connection.ops.quote_name
    fields = [meta.get_field(name) for name in ("user", "epoch", "offset", "kind", "data",
                                                "created_at")]
    columns = ", ".join(q(field.column) for field in fields)
    marks = ", ".join(["%s"] * len(fields))
    tail = f" RETURNING {q(meta.pk.column)}" if returning else ""
    return (f"INSERT INTO {q(meta.db_table)} ({columns}) VALUES ({marks}) "  # noqa: S608
            f"ON CONFLICT DO NOTHING{tail}", fields)


def ring(event: TopicEvent) -> None:
    """After commit: tell the user's connections (the bell, with the publication) and drop the
    offset from the pending set, in one ``MULTI`` on the calling thread's own Redis connection
    (``apps.gateway.livebus.ring_bell``), without waiting for the reply. A bell or settle that
    fails is harmless: connections poll the watermark, and the gap filler finds the row and
    settles the offset."""
    try:
        livebus.ring_bell(event.user_id, epoch=event.epoch, offset=event.offset,
                          data=event.publication())
    except Exception:  # the bell is best effort: connections also poll the watermark
        log.exception("topic bell failed for user %s offset %s", event.user_id, event.offset)


def read_range(
    user_id: int, epoch: str, after: int, upto: int, limit: int | None = None
) -> list[TopicEvent]:
    """Rows of ``epoch`` with ``after < offset <= upto``, ascending (at most ``limit``)."""
    rows = TopicEvent.objects.filter(
        user_id=user_id, epoch=epoch, offset__gt=after, offset__lte=upto
    ).order_by("offset")
    return list(rows if limit is None else rows[:limit])


GAP_JSON = '{"type":"gap","data":{}}'


def read_raw(
    user_id: int, epoch: str, after: int, upto: int, limit: int | None = None
) -> list[tuple[int, str]]:
    """``(offset, publication data as JSON text)`` of ``read_range``'s rows, as the database
    prints them: replay sends them on with ``orjson.Fragment``, never decoding or re-encoding a
    publication (docs/performance.md, replay). One plain SQL statement: the ORM's row handling
    cost four times the query itself (420 against 110 us of CPU for 100 rows), and every
    reconnecting client runs it."""
    sql = _read_raw_sql()
    params: list[Any] = [user_id, epoch, after, upto]
    if limit is not None:
        sql += " LIMIT %s"
        params.append(limit)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [(offset, GAP_JSON if kind == TopicEvent.Kind.GAP else raw)
            for offset, kind, raw in rows]


@functools.cache
def _read_raw_sql() -> str:
    """``read_raw``'s query: names from the model's metadata, values bound."""
    meta, q = TopicEvent._meta, connection.ops.quote_name
    col = {name: q(meta.get_field(name).column) for name in ("user", "epoch", "offset", "kind",
                                                             "data")}
    return (f"SELECT {col['offset']}, {col['kind']}, CAST({col['data']} AS TEXT) "  # noqa: S608
            f"FROM {q(meta.db_table)} WHERE {col['user']} = %s AND {col['epoch']} = %s "
            f"AND {col['offset']} > %s AND {col['offset']} <= %s ORDER BY {col['offset']}")


def fill_gaps(user_id: int, *, grace: float | None = None) -> int:
    """Turn allocations older than ``grace`` seconds that never committed into ``gap`` rows.

    Each fill is an insert that conflicts on the unique position; on PostgreSQL it waits for a
    transaction still holding that position, on SQLite for the write lock. Afterwards the row at
    the position (gap or real) is rung, so connections waiting on the hole move on. Returns the
    number of positions settled.
    """
    grace = rtc_setting("GAP_GRACE") if grace is None else grace
    r = get_redis()
    pos = position(user_id)
    seconds, micros = r.time()
    stale = r.zrangebyscore(keys.topic_pending(user_id), "-inf", seconds + micros / 1e6 - grace)
    for raw in stale:
        offset = int(raw)
        TopicEvent.objects.bulk_create(
            [
                TopicEvent(
                    user_id=user_id, epoch=pos.epoch, offset=offset, kind=TopicEvent.Kind.GAP
                )
            ],
            ignore_conflicts=True,
        )
        event = TopicEvent.objects.get(user_id=user_id, epoch=pos.epoch, offset=offset)
        ring(event)
    if stale:  # the bells' settles run before this returns: the watermark has moved on
        livebus.sync()
    r.eval(_FORGET_IF_SETTLED, 2, keys.topic_pending(user_id), keys.topic_pending_users(), user_id)
    return len(stale)


def fill_all_gaps() -> int:
    """Sweep every user with pending allocations (run periodically by the worker).

    Users are isolated from each other: one whose fill fails is logged and retried next sweep.
    A user who no longer exists has no stream to repair; their pending offsets are dropped
    (inserting a gap row for them would violate the foreign key on every sweep, for ever).
    """
    from django.contrib.auth import get_user_model

    total = 0
    r = get_redis()
    ids = [int(u) for u in r.smembers(keys.topic_pending_users()) if str(u).isdigit()]
    alive = set(get_user_model().objects.filter(pk__in=ids).values_list("pk", flat=True))
    for uid in ids:
        if uid not in alive:
            forget_user(uid)
            continue
        try:
            total += fill_gaps(uid)
        except Exception:
            log.exception("filling topic gaps of user %s failed", uid)
    return total


def forget_user(user_id: int) -> None:
    """Drop a deleted user's stream state from Redis (their rows went with them)."""
    r = get_redis()
    r.delete(keys.topic_pending(user_id), keys.topic_offset(user_id), keys.topic_epoch(user_id))
    r.srem(keys.topic_pending_users(), str(user_id))
    log.info("dropped the topic state of deleted user %s", user_id)


def prune(*, older_than: float, batch: int = 5000) -> int:
    """Delete topic rows older than ``older_than`` seconds; returns how many.

    A client whose position falls in the pruned range gets ``recovered: false`` and reloads
    (``recovery.topic_start`` checks the rows are all there).
    """
    from datetime import timedelta

    from django.utils import timezone

    cutoff = timezone.now() - timedelta(seconds=older_than)
    total = 0
    while True:
        ids = list(
            TopicEvent.objects.filter(created_at__lt=cutoff).values_list("id", flat=True)[:batch]
        )
        if not ids:
            return total
        total += TopicEvent.objects.filter(id__in=ids).delete()[0]
