"""The queue of background extraction jobs, on Redis: at most one pending job per session, and
never two runs of one session at once.

Keys (``rtc:mem:x:`` prefix): ``pending``, a sorted set of session ids (score: when queued);
``running``, a sorted set of the sessions being extracted (score: the lease's end); and per
session a ``lock`` holding the runner's token, with the lease as its expiry.

* ``enqueue`` is ``ZADD NX``: a session already pending stays so, once.
* ``claim`` takes the oldest pending session whose lock it can set (``SET NX PX``) and moves it
  to ``running``, in one script; a session being extracted can be queued again meanwhile (the
  conversation went on), and is claimed after the run ends.
* A runner renews its lease while the call streams (``Job.renew``); one that vanished lets it
  run out, and ``sweep`` (the worker's sweep) queues the session again.
* ``Job.finish`` and ``Job.release`` (give the job back, queued again) act only while the
  token is the runner's, so a runner that lost its lease changes nothing.

Redis is not the only copy of anything here: a lost job is queued again by the next turn's
trigger, since the extraction's bookmark (``ExtractionState``) lives in the database.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

from rtcagent import keys
from rtcagent.redis import get_redis

from .limits import memory_setting

PENDING = keys.MEMORY_JOBS_PENDING
RUNNING = keys.MEMORY_JOBS_RUNNING


def lock_key(session_id: str) -> str:
    return keys.memory_job_lock(session_id)


# KEYS: pending, running. ARGV: token, lease_ms, now_ms, scan.
_CLAIM = """
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[4]) - 1)
for _, sid in ipairs(ids) do
  if redis.call('SET', 'rtc:mem:x:{' .. sid .. '}:lock', ARGV[1], 'NX', 'PX', ARGV[2]) then
    redis.call('ZREM', KEYS[1], sid)
    redis.call('ZADD', KEYS[2], tonumber(ARGV[3]) + tonumber(ARGV[2]), sid)
    return sid
  end
end
return false
"""

# KEYS: lock, running, pending. ARGV: token, session id, requeue (0/1), now_ms.
_END = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
if ARGV[3] == '1' then redis.call('ZADD', KEYS[3], 'NX', ARGV[4], ARGV[2]) end
return 1
"""

# KEYS: lock, running. ARGV: token, lease_ms, now_ms, session id.
_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], tonumber(ARGV[3]) + tonumber(ARGV[2]), ARGV[4])
return 1
"""

# KEYS: running, pending. ARGV: now_ms. Sessions whose runner vanished are queued again.
_SWEEP = """
local out = {}
for _, sid in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])) do
  if redis.call('EXISTS', 'rtc:mem:x:{' .. sid .. '}:lock') == 0 then
    redis.call('ZREM', KEYS[1], sid)
    redis.call('ZADD', KEYS[2], 'NX', ARGV[1], sid)
    table.insert(out, sid)
  end
end
return out
"""


def _now_ms() -> int:
    return int(time.time() * 1000)


def enqueue(session_id: str) -> bool:
    """Queue an extraction of the session; False when one is pending already."""
    return bool(get_redis().zadd(PENDING, {str(session_id): _now_ms()}, nx=True))


def pending() -> list[str]:
    return [str(s) for s in get_redis().zrange(PENDING, 0, -1)]


def running() -> list[str]:
    return [str(s) for s in get_redis().zrange(RUNNING, 0, -1)]


@dataclass
class Job:
    """A claimed extraction: renew it while it runs, then ``finish`` or ``release`` it."""

    session_id: str
    token: str
    lease_ms: int
    renewed_at: float = 0.0
    lost: bool = False

    def renew(self, *, force: bool = False) -> bool:
        """Extend the lease (at most every third of it unless ``force``); False once lost."""
        if self.lost:
            return False
        now = time.monotonic()
        if not force and now - self.renewed_at < self.lease_ms / 3000:
            return True
        ok = bool(get_redis().eval(_RENEW, 2, lock_key(self.session_id), RUNNING,
                                   self.token, self.lease_ms, _now_ms(), self.session_id))
        self.renewed_at = now
        self.lost = not ok
        return ok

    def finish(self) -> bool:
        return self._end(requeue=False)

    def release(self) -> bool:
        """Give the job back unfinished: the session is queued again (first in line)."""
        return self._end(requeue=True)

    def _end(self, *, requeue: bool) -> bool:
        return bool(get_redis().eval(_END, 3, lock_key(self.session_id), RUNNING, PENDING,
                                     self.token, self.session_id, int(requeue), 0))


def claim(*, scan: int = 50) -> Job | None:
    """Claim the oldest pending extraction that nobody runs."""
    lease = int(memory_setting("MEMORY_EXTRACT_LEASE_MS"))
    token = secrets.token_hex(8)
    sid = get_redis().eval(_CLAIM, 2, PENDING, RUNNING, token, lease, _now_ms(), scan)
    if not sid:
        return None
    return Job(str(sid), token, lease, renewed_at=time.monotonic())


def sweep() -> list[str]:
    """Queue again the extractions whose runner's lease ran out; returns their sessions."""
    return [str(s) for s in get_redis().eval(_SWEEP, 2, RUNNING, PENDING, _now_ms())]
