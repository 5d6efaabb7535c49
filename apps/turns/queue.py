"""The session work queue on Redis, with the hold-lock discipline.

Per session there are two lists, ``resume`` (tool results, timeouts, recoveries) and ``msg``
(new user messages); a ``ready`` sorted set names the sessions that have work; a ``lock`` key
with a lease names the worker holding a session; an ``inflight`` key keeps the item being
processed until it is acknowledged.

Invariants (each mutation is one Lua script or one single command, so none can interleave with
another):

* A session is held by at most one worker: the lock is ``SET NX PX``; every operation of a
  holder checks that the lock still carries its token.
* The holder drains the session: ``take`` returns resume items before messages, and releases the
  lock in the same script that finds both lists empty, so an item enqueued concurrently is either
  seen by that ``take`` or finds the lock free and puts the session back in ``ready``.
* Nothing is lost when a worker dies: its item stays in ``inflight`` and its lease runs out;
  ``sweep`` puts the item back at the head of its list and the session back in ``ready`` (a
  ``claim`` that gets there first does the same before its holder takes anything).
* A claim never depends on a notification: the bell (a list workers block on) only shortens the
  wait; claims read ``ready`` itself, and workers also poll it.
* A holder takes at most ``max_items`` items per hold, then ``yield_session`` puts the session at
  the back of ``ready`` so one busy session cannot starve the others.
* While a turn of the session waits on the browser the session is *parked*: ``take`` hands out
  resume items only, so messages sent meanwhile queue behind the turn, in order. ``unpark``
  (when the turn ends) makes them takeable again. The database stays the judge: a worker that
  finds an active turn anyway parks the session and puts the message back.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from rtcagent.redis import get_redis

P = "rtc:q"
READY = f"{P}:ready"
BELL = f"{P}:bell"
HELD = f"{P}:held"  # zset: session -> lease deadline (ms), for the sweeper


def _k(session_id: str, part: str) -> str:
    return f"{P}:s:{{{session_id}}}:{part}"


_ENQUEUE = """
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], 'NX', ARGV[2], ARGV[3])
redis.call('LPUSH', KEYS[3], '1')
redis.call('LTRIM', KEYS[3], 0, 63)
return 1
"""

# A dead holder's un-acked item goes back to the head of the list it came from.
_REQUEUE_INFLIGHT = """
local function requeue_inflight(base)
  local raw = redis.call('GET', base .. 'inflight')
  if raw then
    local f = cjson.decode(raw)
    redis.call('LPUSH', base .. f.src, f.item)
    redis.call('DEL', base .. 'inflight')
  end
end
"""

# KEYS: ready, held. ARGV: token, lease_ms, now_ms, scan. Returns a session id or false.
# An ``inflight`` item found under a free lock is a dead holder's (its lease ran out before any
# sweep): it goes back to the head of its list, or this holder's first ``take`` would drop it.
_CLAIM = _REQUEUE_INFLIGHT + """
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[4]) - 1)
for _, sid in ipairs(ids) do
  local base = 'rtc:q:s:{' .. sid .. '}:'
  if redis.call('SET', base .. 'lock', ARGV[1], 'NX', 'PX', ARGV[2]) then
    requeue_inflight(base)
    redis.call('ZREM', KEYS[1], sid)
    redis.call('ZADD', KEYS[2], tonumber(ARGV[3]) + tonumber(ARGV[2]), sid)
    return sid
  end
end
return false
"""

# KEYS: lock, resume, msg, inflight, held, ready, parked. ARGV: token, session id.
_TAKE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {'lost'} end
local item = redis.call('LPOP', KEYS[2])
local src = 'resume'
if not item and redis.call('EXISTS', KEYS[7]) == 0 then
  item = redis.call('LPOP', KEYS[3]); src = 'msg'
end
if not item then
  redis.call('DEL', KEYS[1], KEYS[4])
  redis.call('ZREM', KEYS[5], ARGV[2])
  redis.call('ZREM', KEYS[6], ARGV[2])
  return {'empty'}
end
redis.call('SET', KEYS[4], cjson.encode({src = src, item = item}))
return {'item', item}
"""

# KEYS: lock, inflight. ARGV: token.
_ACK = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
return 1
"""

# KEYS: lock, held. ARGV: token, lease_ms, now_ms, session id.
_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], tonumber(ARGV[3]) + tonumber(ARGV[2]), ARGV[4])
return 1
"""

# KEYS: lock, held, ready, resume, msg, inflight. ARGV: token, session id, now_ms.
_YIELD = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
if redis.call('EXISTS', KEYS[6]) == 1 then
  local f = cjson.decode(redis.call('GET', KEYS[6]))
  if f.src == 'resume' then redis.call('LPUSH', KEYS[4], f.item)
  else redis.call('LPUSH', KEYS[5], f.item) end
  redis.call('DEL', KEYS[6])
end
if redis.call('LLEN', KEYS[4]) + redis.call('LLEN', KEYS[5]) > 0 then
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
end
return 1
"""

# KEYS: held, ready. ARGV: now_ms. Requeues the work of sessions whose holder vanished.
_SWEEP = _REQUEUE_INFLIGHT + """
local out = {}
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
for _, sid in ipairs(expired) do
  local base = 'rtc:q:s:{' .. sid .. '}:'
  if redis.call('EXISTS', base .. 'lock') == 0 then
    requeue_inflight(base)
    redis.call('ZREM', KEYS[1], sid)
    if redis.call('LLEN', base .. 'resume') + redis.call('LLEN', base .. 'msg') > 0 then
      redis.call('ZADD', KEYS[2], ARGV[1], sid)
    end
    table.insert(out, sid)
  end
end
return out
"""


def _now_ms() -> int:
    return int(time.time() * 1000)


def enqueue(session_id: str, item: dict[str, Any], *, resume: bool = False) -> None:
    """Append work for a session; resume items are always taken before messages."""
    get_redis().eval(
        _ENQUEUE, 3,
        _k(session_id, "resume" if resume else "msg"), READY, BELL,
        json.dumps(item), _now_ms(), session_id,
    )


def enqueue_message(session_id: object, message_id: object) -> None:
    """Queue the turn for a user message (behind any turn of the session still open)."""
    enqueue(str(session_id), {"kind": "message", "message_id": str(message_id)})


def enqueue_resume(session_id: object, turn_id: object) -> None:
    """Queue the continuation of a turn (its RTC finished, or nobody was running it)."""
    enqueue(str(session_id), {"kind": "resume", "turn_id": str(turn_id)}, resume=True)


def pending(session_id: str) -> dict[str, int]:
    r = get_redis()
    return {
        "resume": r.llen(_k(session_id, "resume")),
        "msg": r.llen(_k(session_id, "msg")),
        "inflight": int(r.exists(_k(session_id, "inflight"))),
    }


_UNPARK = """
redis.call('DEL', KEYS[1])
if redis.call('LLEN', KEYS[2]) > 0 and redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('ZADD', KEYS[4], 'NX', ARGV[1], ARGV[2])
  redis.call('LPUSH', KEYS[5], '1')
end
return 1
"""


def park(session_id: str) -> None:
    """A turn of this session waits on the browser: hold its new messages back."""
    get_redis().set(_k(session_id, "parked"), "1")


def unpark(session_id: str) -> None:
    """The session's turn ended: its queued messages may run."""
    get_redis().eval(
        _UNPARK, 5, _k(session_id, "parked"), _k(session_id, "msg"), _k(session_id, "lock"),
        READY, BELL, _now_ms(), session_id,
    )


def requeue_front(session_id: str, item: dict[str, Any]) -> None:
    """Put a message item back at the head of its list (taken again after unpark)."""
    get_redis().lpush(_k(session_id, "msg"), json.dumps(item))


def is_held(session_id: str) -> bool:
    return bool(get_redis().exists(_k(session_id, "lock")))


@dataclass
class Hold:
    """A worker's hold on one session; use ``take``/``ack`` until ``take`` returns None."""

    session_id: str
    token: str
    lease_ms: int
    lost: bool = False

    def _keys(self, *parts: str) -> list[str]:
        return [_k(self.session_id, p) for p in parts]

    def take(self) -> dict[str, Any] | None:
        """The next item (resume first), or None: then the lock is already released."""
        res = get_redis().eval(
            _TAKE, 7, *self._keys("lock", "resume", "msg", "inflight"), HELD, READY,
            _k(self.session_id, "parked"), self.token, self.session_id,
        )
        if res[0] == "lost":
            self.lost = True
            return None
        if res[0] == "empty":
            return None
        return json.loads(res[1])

    def ack(self) -> bool:
        """The current item is done (its effects are committed)."""
        return bool(get_redis().eval(_ACK, 2, *self._keys("lock", "inflight"), self.token))

    def renew(self) -> bool:
        ok = bool(
            get_redis().eval(
                _RENEW, 2, _k(self.session_id, "lock"), HELD,
                self.token, self.lease_ms, _now_ms(), self.session_id,
            )
        )
        self.lost = self.lost or not ok
        return ok

    def yield_session(self) -> None:
        """Give the session up while it still has work: it goes to the back of ``ready``."""
        get_redis().eval(
            _YIELD, 6, _k(self.session_id, "lock"), HELD, READY,
            *self._keys("resume", "msg", "inflight"), self.token, self.session_id, _now_ms(),
        )


def claim(*, lease_ms: int, scan: int = 200) -> Hold | None:
    """Take the lock of the oldest ready session that nobody holds."""
    token = secrets.token_hex(8)
    sid = get_redis().eval(_CLAIM, 2, READY, HELD, token, lease_ms, _now_ms(), scan)
    return Hold(str(sid), token, lease_ms) if sid else None


def wait_for_bell(timeout: float) -> None:
    """Block until some work was enqueued or ``timeout`` passed (a hint, never a guarantee)."""
    get_redis().blpop([BELL], timeout=max(1, int(timeout)))


def sweep() -> list[str]:
    """Requeue the work of sessions whose holder's lease ran out; returns those sessions."""
    return list(get_redis().eval(_SWEEP, 2, HELD, READY, _now_ms()))
