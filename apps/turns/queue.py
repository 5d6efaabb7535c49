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
  the back of its owner's sessions in ``ready`` so one busy session cannot starve the others.
* While a turn of the session waits on the browser the session is *parked*: ``take`` hands out
  resume items only, so messages sent meanwhile queue behind the turn, in order. ``unpark``
  (when the turn ends) makes them takeable again. The database stays the judge: a worker that
  finds an active turn anyway parks the session and puts the message back.
* Users are served round robin, whatever their number of sessions: ``ready`` is ordered by a
  virtual time, not a clock. A session that becomes ready gets the tag ``max(vclock, its
  owner's last tag + 1)``; a claim takes the lowest free tag and moves ``vclock`` up to it. So a
  user has at most one session per round, and a newcomer enters at the current round: it waits
  behind at most one session per other user, never behind a backlog. A session enqueued while
  held is put in ``ready`` at ``vclock`` without a tag (its holder drains it; the score only
  matters if the holder dies), so a busy session does not push its owner's later work back.
* A holder gives the session up inside ``take`` (``take`` returns None, the lock released, the
  session re-tagged with its work intact) once it took ``quantum`` items while a session of
  another user with a lower or equal tag waits unclaimed. A hold's first item is always handed
  out, so every claim makes progress.
* The owner of a session is recorded by the enqueues that know it (``user_id``), for the
  scripts that make a session ready without being told (sweep, yield, unpark, other callers);
  sessions with no recorded owner share one bucket.
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
VCLOCK = f"{P}:vclock"  # the tag of the latest claim: the current round of the fair order
OWNER_TTL = 30 * 86400  # seconds an owner record outlives the session's last enqueue
FAIR_QUANTUM = 1  # items a hold takes before it gives way to another user's waiting session
FAIR_SCAN = 64  # waiting sessions a take looks at to find another user's


def _k(session_id: str, part: str) -> str:
    return f"{P}:s:{{{session_id}}}:{part}"


def _u(owner: str, part: str) -> str:
    return f"{P}:u:{{{owner}}}:{part}"


def has_claimable(scan: int = 32) -> bool:
    """Whether one of the first ``scan`` ready sessions is free to be claimed (not held by a
    worker): idle work (memory extraction) gives way as soon as this turns true."""
    r = get_redis()
    ids = r.zrange(READY, 0, scan - 1)
    if not ids:
        return False
    with r.pipeline(transaction=False) as pipe:
        for sid in ids:
            pipe.exists(_k(sid, "lock"))
        held = pipe.execute()
    return not all(held)


# The fair order (see the module docstring). A user's ``last`` tag expires a day after its last
# use: by then the clock has long passed it. An unknown owner is the shared bucket ``_``.
_FAIR = """
local function owner_of(sid)
  return redis.call('GET', 'rtc:q:s:{' .. sid .. '}:user') or '_'
end
local function next_tag(sid)
  local tag = tonumber(redis.call('GET', 'rtc:q:vclock') or '0')
  local last = redis.call('GET', 'rtc:q:u:{' .. owner_of(sid) .. '}:last')
  if last and tonumber(last) + 1 > tag then tag = tonumber(last) + 1 end
  return tag
end
local function make_ready(sid, again)
  if not again and redis.call('ZSCORE', 'rtc:q:ready', sid) then return end
  local tag = next_tag(sid)
  redis.call('SET', 'rtc:q:u:{' .. owner_of(sid) .. '}:last', tag, 'EX', 86400)
  redis.call('ZADD', 'rtc:q:ready', tag, sid)
end
"""


# KEYS: list, ready, bell, owner, lock, wake. ARGV: item, session id, user id or "", owner ttl,
# for a resume item the wake-up pushed to a holder waiting in place (``wait_for_wake``: "1", or
# the finished RTC's outcome), "" otherwise.
_ENQUEUE = _FAIR + """
redis.call('RPUSH', KEYS[1], ARGV[1])
if ARGV[3] ~= '' then redis.call('SET', KEYS[4], ARGV[3], 'EX', ARGV[4])
else redis.call('EXPIRE', KEYS[4], ARGV[4]) end
if redis.call('EXISTS', KEYS[5]) == 1 then
  redis.call('ZADD', KEYS[2], 'NX', redis.call('GET', 'rtc:q:vclock') or '0', ARGV[2])
  if ARGV[5] ~= '' then
    redis.call('LPUSH', KEYS[6], ARGV[5])
    redis.call('LTRIM', KEYS[6], 0, 0)
    redis.call('PEXPIRE', KEYS[6], 60000)
  end
else
  make_ready(ARGV[2], false)
end
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

# ``claim_one`` (after ``requeue_inflight``): the lock of the first free session in ``ready``,
# its id (or false). An ``inflight`` item found under a free lock is a dead holder's (its lease
# ran out before any sweep): it goes back to the head of its list, or this holder's first
# ``take`` would drop it.
_CLAIM_ONE = """
local function claim_one(ready, held, vclock, token, lease_ms, now_ms, scan)
  local ids = redis.call('ZRANGE', ready, 0, tonumber(scan) - 1, 'WITHSCORES')
  for i = 1, #ids, 2 do
    local sid = ids[i]
    local base = 'rtc:q:s:{' .. sid .. '}:'
    if redis.call('SET', base .. 'lock', token, 'NX', 'PX', lease_ms) then
      requeue_inflight(base)
      redis.call('ZREM', ready, sid)
      redis.call('ZADD', held, tonumber(now_ms) + tonumber(lease_ms), sid)
      if tonumber(ids[i + 1]) > tonumber(redis.call('GET', vclock) or '0') then
        redis.call('SET', vclock, ids[i + 1])
      end
      return sid
    end
  end
  return false
end
"""

# KEYS: ready, held, vclock. ARGV: token, lease_ms, now_ms, scan. Returns a session id or false.
_CLAIM = _REQUEUE_INFLIGHT + _CLAIM_ONE + """
return claim_one(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
"""

# True when a free session of another user is due no later than ``sid`` would be if re-tagged.
_OTHER_USER_DUE = """
local function other_user_due(sid, scan)
  local me = owner_of(sid)
  local ids = redis.call('ZRANGEBYSCORE', 'rtc:q:ready', '-inf', next_tag(sid), 'LIMIT', 0, scan)
  for _, other in ipairs(ids) do
    if other ~= sid and redis.call('EXISTS', 'rtc:q:s:{' .. other .. '}:lock') == 0
        and owner_of(other) ~= me then
      return true
    end
  end
  return false
end
"""

# The holder lets the session go: its un-acknowledged item back at the head of its list, the
# session at the back of its owner's round while work remains.
_GIVE_UP = _FAIR + _REQUEUE_INFLIGHT + """
local function give_up(sid)
  local base = 'rtc:q:s:{' .. sid .. '}:'
  redis.call('DEL', base .. 'lock')
  redis.call('ZREM', 'rtc:q:held', sid)
  requeue_inflight(base)
  if redis.call('LLEN', base .. 'resume') + redis.call('LLEN', base .. 'msg') > 0 then
    make_ready(sid, true)
  end
end
"""

# ``take_next``: the holder's next item of session ``sid``: {'item', item}, {'empty'} (the lock
# released), {'yielded'} or {'lost'}.
_TAKE_NEXT = _GIVE_UP + _OTHER_USER_DUE + """
local function take_next(sid, token, taken, quantum, scan)
  local base = 'rtc:q:s:{' .. sid .. '}:'
  local lock, resume, msg, inflight = base .. 'lock', base .. 'resume', base .. 'msg',
    base .. 'inflight'
  local parked = redis.call('EXISTS', base .. 'parked') == 1
  if redis.call('GET', lock) ~= token then return {'lost'} end
  local takeable = redis.call('LLEN', resume) > 0
    or (not parked and redis.call('LLEN', msg) > 0)
  if takeable and tonumber(taken) >= tonumber(quantum) and other_user_due(sid, tonumber(scan)) then
    give_up(sid)
    return {'yielded'}
  end
  local item = redis.call('LPOP', resume)
  local src = 'resume'
  if not item and not parked then
    item = redis.call('LPOP', msg); src = 'msg'
  end
  if not item then
    redis.call('DEL', lock, inflight)
    redis.call('ZREM', 'rtc:q:held', sid)
    redis.call('ZREM', 'rtc:q:ready', sid)
    return {'empty'}
  end
  redis.call('SET', inflight, cjson.encode({src = src, item = item}))
  return {'item', item}
end
"""

# KEYS: lock, resume, msg, inflight, held, ready, parked (named for the record: the script
# derives them from the session id, as every script here does). ARGV: token, session id, items
# taken in this hold, quantum, scan.
_TAKE = _TAKE_NEXT + """
return take_next(ARGV[2], ARGV[1], ARGV[3], ARGV[4], ARGV[5])
"""

# ``claim`` and the hold's first ``take`` in one round trip (``claim(take=True)``). KEYS: ready,
# held, vclock. ARGV: token, lease_ms, now_ms, scan, quantum, fair scan. Returns false, or the
# session id and ``take_next``'s answer.
_CLAIM_TAKE = _TAKE_NEXT + _CLAIM_ONE + """
local sid = claim_one(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
if not sid then return false end
local got = take_next(sid, ARGV[1], 0, ARGV[5], ARGV[6])
return {sid, got[1], got[2]}
"""

# KEYS: lock, inflight. ARGV: token.
_ACK = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
return 1
"""

# KEYS: lock, resume. ARGV: token, item.
_DROP_RESUMES = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('LREM', KEYS[2], 0, ARGV[2])
"""

# KEYS: lock, held. ARGV: token, lease_ms, now_ms, session id.
_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], tonumber(ARGV[3]) + tonumber(ARGV[2]), ARGV[4])
return 1
"""

# KEYS: lock. ARGV: token, session id.
_YIELD = _GIVE_UP + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
give_up(ARGV[2])
return 1
"""

# KEYS: held, ready. ARGV: now_ms. Requeues the work of sessions whose holder vanished.
_SWEEP = _FAIR + _REQUEUE_INFLIGHT + """
local out = {}
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
for _, sid in ipairs(expired) do
  local base = 'rtc:q:s:{' .. sid .. '}:'
  if redis.call('EXISTS', base .. 'lock') == 0 then
    requeue_inflight(base)
    redis.call('ZREM', KEYS[1], sid)
    if redis.call('LLEN', base .. 'resume') + redis.call('LLEN', base .. 'msg') > 0 then
      make_ready(sid, false)
    end
    table.insert(out, sid)
  end
end
return out
"""


def _now_ms() -> int:
    return int(time.time() * 1000)


def enqueue(
    session_id: str, item: dict[str, Any], *, resume: bool = False, user_id: object = None,
    wake: str = "1",
) -> None:
    """Append work for a session; resume items are always taken before messages.

    ``user_id`` records the session's owner for the fair order; without it the owner recorded
    by an earlier enqueue is used. ``wake``: what a resume item hands a holder waiting in
    place (``Hold.wait_for_wake``).
    """
    get_redis().eval(
        _ENQUEUE, 6,
        _k(session_id, "resume" if resume else "msg"), READY, BELL, _k(session_id, "user"),
        _k(session_id, "lock"), _k(session_id, "wake"),
        json.dumps(item), session_id, "" if user_id is None else str(user_id), OWNER_TTL,
        wake if resume else "",
    )


def enqueue_message(session_id: object, message_id: object, *, user_id: object = None,
                    turn_id: object = None) -> None:
    """Queue the turn for a user message (behind any turn of the session still open);
    ``turn_id``: the turn created with it (``message_send``), which the worker runs."""
    work = {"kind": "message", "message_id": str(message_id)}
    if turn_id is not None:
        work["turn_id"] = str(turn_id)
    enqueue(str(session_id), work, user_id=user_id)


def _resume_item(turn_id: object) -> dict[str, Any]:
    return {"kind": "resume", "turn_id": str(turn_id)}


def enqueue_resume(session_id: object, turn_id: object, *, user_id: object = None,
                   outcome: dict[str, Any] | None = None) -> None:
    """Queue the continuation of a turn (its RTC finished, or nobody was running it).

    ``outcome``: the finished RTC's, as committed (``wake_outcome``); a worker waiting in place
    for it then goes on without reading the RTC back (``DjangoTurnPorts.await_result``)."""
    enqueue(str(session_id), _resume_item(turn_id), resume=True, user_id=user_id,
            wake="1" if outcome is None else json.dumps(outcome))


WAKE_TEXT_MAX = 64 * 1024  # a longer outcome is read from the database instead


def wake_outcome(*, rtc_id: object, status: str, text: str, written: bool
                 ) -> dict[str, Any] | None:
    """A finished RTC's outcome for ``enqueue_resume``: its id, its status, the text the model
    sees and whether its ``toolcall_output`` message was written with it; None when the text
    is too long to pass through Redis twice."""
    if len(text) > WAKE_TEXT_MAX:
        return None
    return {"rtc": str(rtc_id), "status": status, "text": text, "written": written}


# --- early results: a tool's result handed to the worker waiting for it before its commit ---
#
# A worker waiting in place for an RTC's result (``DjangoTurnPorts.await_result``) names its
# session's wake-up list under the RTC's ``early`` key (``Hold.expect_result``). The web process
# that receives the result offers it there before its transaction (``offer_result``), and the
# worker may send the next model request at once; it writes and shows nothing of it until the
# commit's own wake-up (``enqueue_resume``, with the committed outcome) confirms the result, and
# drops it when the submit withdraws its offer (``withdraw_offer``: the result was not applied)
# or never confirms it. Offers are hints under the same rule as every wake-up: the database
# decides.

# KEYS: early. ARGV: the wake-up to push. Pushed only while a worker expects it.
_OFFER = """
local wake = redis.call('GET', KEYS[1])
if not wake then return 0 end
redis.call('LPUSH', wake, ARGV[1])
redis.call('LTRIM', wake, 0, 7)
redis.call('PEXPIRE', wake, 60000)
return 1
"""
EARLY_PREFIX = "early:"
WITHDRAWN_PREFIX = "withdrawn:"


def early_key(rtc_id: object) -> str:
    return f"{P}:early:{{{rtc_id}}}"


def offer_result(rtc_id: object, offer: dict[str, Any]) -> bool:
    """Hand ``offer`` (the result as its submit received it, not yet stored) to the worker
    waiting in place for RTC ``rtc_id``, if one is; True when one was."""
    return bool(get_redis().eval(_OFFER, 1, early_key(rtc_id),
                                 EARLY_PREFIX + json.dumps(offer)))


def withdraw_offer(rtc_id: object, token: str) -> None:
    """The offer ``token`` of RTC ``rtc_id`` was not applied (the submit failed, or found the
    RTC finished): the worker that took it drops what it began with it."""
    get_redis().eval(_OFFER, 1, early_key(rtc_id), WITHDRAWN_PREFIX + token)


def pending(session_id: str) -> dict[str, int]:
    r = get_redis()
    return {
        "resume": r.llen(_k(session_id, "resume")),
        "msg": r.llen(_k(session_id, "msg")),
        "inflight": int(r.exists(_k(session_id, "inflight"))),
    }


# KEYS: parked, msg, lock, ready, bell. ARGV: session id.
_UNPARK = _FAIR + """
redis.call('DEL', KEYS[1])
if redis.call('LLEN', KEYS[2]) > 0 and redis.call('EXISTS', KEYS[3]) == 0 then
  make_ready(ARGV[1], false)
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
        READY, BELL, session_id,
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
    quantum: int = FAIR_QUANTUM
    taken: int = 0  # items handed out in this hold
    yielded: bool = False  # the last ``take`` gave the session way to another user's
    first: list[Any] | None = None  # the first ``take``'s answer, when the claim took it

    def _keys(self, *parts: str) -> list[str]:
        return [_k(self.session_id, p) for p in parts]

    def take(self) -> dict[str, Any] | None:
        """The next item (resume first), or None: then the lock is already released.

        None also when the session gave way to another user's (``yielded``): its work is back
        in ``ready``, intact, for the next claim.
        """
        if self.first is not None:  # taken with the claim (``claim(take=True)``)
            res, self.first = self.first, None
        else:
            res = get_redis().eval(
                _TAKE, 7, *self._keys("lock", "resume", "msg", "inflight"), HELD, READY,
                _k(self.session_id, "parked"),
                self.token, self.session_id, self.taken, self.quantum, FAIR_SCAN,
            )
        if res[0] == "lost":
            self.lost = True
            return None
        if res[0] in ("empty", "yielded"):
            self.yielded = res[0] == "yielded"
            return None
        self.taken += 1
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

    # --- a turn waiting in place for its RTC's result (``DjangoTurnPorts.await_result``) ---

    @property
    def wake_key(self) -> str:
        """Where ``enqueue`` pushes a wake-up; dropped before the waiter's RTC is created."""
        return _k(self.session_id, "wake")

    def wait_for_wake(self, timeout: float) -> str | None:
        """Block until a resume item of this session is enqueued (while held, ``enqueue``
        also pushes a wake-up) or ``timeout`` seconds pass; the wake-up ("1", the JSON of
        ``wake_outcome``, or an early offer or its withdrawal: ``offer_result``), None when not
        woken. A hint, like the bell: the caller reads the state it waits for unless the
        wake-up names it."""
        woken = get_redis().blpop([self.wake_key], timeout=max(0.01, timeout))
        return None if woken is None else woken[1]

    def expect_result(self, rtc_id: object, ttl: float) -> None:
        """For ``ttl`` seconds, results of RTC ``rtc_id`` may be offered to this holder before
        their commit (``offer_result``), on the session's wake-up list."""
        get_redis().set(early_key(rtc_id), self.wake_key, px=max(1, int(ttl * 1000)))

    def drop_resumes(self, turn_id: object) -> int:
        """Remove the queued resume items of ``turn_id``: this holder continues the turn in
        place, so the items its RTC's result queued have nothing left to do. Returns how many
        there were (0 when the hold is lost)."""
        return int(get_redis().eval(
            _DROP_RESUMES, 2, *self._keys("lock", "resume"), self.token,
            json.dumps(_resume_item(turn_id)),
        ))

    def yield_session(self) -> None:
        """Give the session up while it still has work: it goes to the back of its owner's
        sessions in ``ready`` (the unacknowledged item, if any, back at the head of its list)."""
        get_redis().eval(_YIELD, 1, _k(self.session_id, "lock"), self.token, self.session_id)


def claim(*, lease_ms: int, scan: int = 200, quantum: int = FAIR_QUANTUM,
          take: bool = False) -> Hold | None:
    """Take the lock of the ready session first in the fair order that nobody holds.

    ``take``: its first item is taken in the same round trip (the hold's first ``take``
    returns it), for a caller that takes at once; a worker starting a turn waits for both."""
    token, quantum = secrets.token_hex(8), max(1, quantum)
    if not take:
        sid = get_redis().eval(_CLAIM, 3, READY, HELD, VCLOCK, token, lease_ms, _now_ms(), scan)
        return Hold(str(sid), token, lease_ms, quantum=quantum) if sid else None
    found = get_redis().eval(_CLAIM_TAKE, 3, READY, HELD, VCLOCK, token, lease_ms, _now_ms(),
                             scan, quantum, FAIR_SCAN)
    if not found:
        return None
    return Hold(str(found[0]), token, lease_ms, quantum=quantum, first=list(found[1:]))


def wait_for_bell(timeout: float) -> None:
    """Block until some work was enqueued or ``timeout`` passed (a hint, never a guarantee)."""
    get_redis().blpop([BELL], timeout=max(1, int(timeout)))


def sweep() -> list[str]:
    """Requeue the work of sessions whose holder's lease ran out; returns those sessions."""
    return list(get_redis().eval(_SWEEP, 2, HELD, READY, _now_ms()))


def depth(*, scan: int = 1000) -> dict[str, int]:
    """The queue's size for operators (the system page, /metrics): sessions with work waiting
    (``ready``), sessions held by a worker (``held``), and the items queued in them (``items``,
    resume and message lists, counted over at most ``scan`` sessions of each set, so a huge
    backlog costs one bounded pipeline; ``truncated`` says when the count stopped there)."""
    r = get_redis()
    ready = r.zrange(READY, 0, scan - 1)
    held = r.zrange(HELD, 0, scan - 1)
    sessions = sorted(set(ready) | set(held))
    with r.pipeline(transaction=False) as pipe:
        pipe.zcard(READY)
        pipe.zcard(HELD)
        for sid in sessions:
            pipe.llen(_k(sid, "resume"))
            pipe.llen(_k(sid, "msg"))
        n_ready, n_held, *lengths = pipe.execute()
    return {
        "ready": int(n_ready),
        "held": int(n_held),
        "items": int(sum(lengths)),
        "truncated": int(n_ready > scan or n_held > scan),
    }
