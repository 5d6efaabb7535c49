"""Limits of the ``/s3/`` endpoint: request rate, stored bytes per user, object and part sizes.

* **Rate** (``S3_REQUESTS_PER_MINUTE`` per user, 0 = off): a counter per clock minute in Redis;
  beyond it ``SlowDown`` (503), which the AWS SDKs retry with backoff. When Redis is away the
  limit is not applied (logged): it protects, it decides nothing.
* **Quota** (``S3_USER_QUOTA_BYTES`` per user prefix, 0 = off): the truth is the store (the sum
  of the sizes listed under the prefix); Redis caches it for ``USAGE_TTL`` seconds. A write
  *reserves* its bytes with one Lua script that checks and adds atomically (no check-then-act
  between concurrent uploads) and gives them back when it fails; deletes drop the cache. The
  cache is rebuilt from the store when it expires, which corrects any drift. Over it:
  ``QuotaExceeded`` (403).
* **Sizes**: one object at most ``S3_MAX_OBJECT_BYTES`` (and S3's 5 GiB for one PUT),
  ``EntityTooLarge`` (400); parts 1..10000, at most 5 GiB, all but the last at least 5 MiB
  (``EntityTooSmall`` at complete), as S3.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import redis

from rtcagent import keys
from rtcagent.conf import rtc_setting
from rtcagent.redis import get_redis

from .base import ObjectStore

log = logging.getLogger(__name__)

MAX_PUT_BYTES = 5 * 1024**3  # S3: one PUT (object or part)
MIN_PART_BYTES = 5 * 1024**2  # S3: every part but the last
MAX_PARTS = 10_000
USAGE_TTL = 900  # seconds a cached usage lives before the store is listed again


class LimitError(Exception):
    """A request over a limit, with its S3 error code."""

    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


# --- sizes -----------------------------------------------------------------------------------


def max_object_bytes() -> int:
    return int(rtc_setting("S3_MAX_OBJECT_BYTES"))


def check_object_size(size: int, *, single_put: bool = True) -> None:
    """``EntityTooLarge`` for an object over the configured maximum (or S3's PUT maximum)."""
    limit = max_object_bytes()
    if single_put:
        limit = min(limit, MAX_PUT_BYTES)
    if size > limit:
        raise LimitError(
            "EntityTooLarge",
            f"Your proposed upload of {size} bytes exceeds the maximum allowed object size of "
            f"{limit} bytes (S3_MAX_OBJECT_BYTES).", 400)


def check_part(part_number: int, size: int, *, uploaded: int) -> None:
    """A part about to be stored: its size, and the object it would make with the ``uploaded``
    bytes of the upload's other parts."""
    if size > MAX_PUT_BYTES:
        raise LimitError("EntityTooLarge",
                         f"A part may be at most {MAX_PUT_BYTES} bytes; this one is {size}.", 400)
    check_object_size(uploaded + size, single_put=False)


def check_parts(sizes: list[int]) -> int:
    """The parts named by a complete call, in order: their total, or the S3 error."""
    for size in sizes[:-1]:
        if size < MIN_PART_BYTES:
            raise LimitError(
                "EntityTooSmall",
                f"Your proposed upload is smaller than the minimum allowed size: every part but "
                f"the last must be at least {MIN_PART_BYTES} bytes.", 400)
    total = sum(sizes)
    check_object_size(total, single_put=False)
    return total


# --- rate ------------------------------------------------------------------------------------


def rate_check(user_id: int, *, now: float | None = None) -> None:
    """Count one request of the user; ``SlowDown`` past ``S3_REQUESTS_PER_MINUTE``."""
    limit = int(rtc_setting("S3_REQUESTS_PER_MINUTE"))
    if limit <= 0:
        return
    window = int((now if now is not None else time.time()) // 60)
    key = keys.s3_rate(user_id, window)
    try:
        pipe = get_redis().pipeline(transaction=False)
        pipe.incr(key)
        pipe.expire(key, 120)
        count = int(pipe.execute()[0])
    except redis.RedisError as exc:
        log.warning("s3 rate limit not applied (Redis: %s)", type(exc).__name__)
        return
    if count > limit:
        raise LimitError("SlowDown",
                         f"Please reduce your request rate (at most {limit} requests a minute).",
                         503)


# --- quota -----------------------------------------------------------------------------------

# Adds ARGV[1] (bytes, may be negative) to the cached usage unless that takes it past ARGV[2];
# {-1} when nothing is cached, {0, usage} when refused, {1, new usage} when done.
_RESERVE = """
local u = redis.call('GET', KEYS[1])
if not u then return {-1, 0} end
u = tonumber(u)
local d = tonumber(ARGV[1])
if d > 0 and u + d > tonumber(ARGV[2]) then return {0, u} end
redis.call('INCRBY', KEYS[1], d)
return {1, u + d}
"""


def quota_bytes() -> int:
    return int(rtc_setting("S3_USER_QUOTA_BYTES"))


def usage_from_store(store: ObjectStore, prefix: str) -> int:
    """The bytes stored under ``prefix``, summed over the store's listing."""
    total, token = 0, None
    while True:
        page = store.list(prefix, max_keys=1000, continuation_token=token)
        total += sum(obj.size for obj in page.objects)
        if not page.is_truncated or not page.next_token:
            return total
        token = page.next_token


def usage_bytes(store: ObjectStore, user_id: int, prefix: str) -> int:
    """The user's stored bytes: the cached figure, else the store's (then cached)."""
    key = keys.s3_usage(user_id)
    try:
        cached = get_redis().get(key)
    except redis.RedisError:
        cached = None
    if cached is not None:
        return int(cached)
    used = usage_from_store(store, prefix)
    try:
        get_redis().set(key, used, nx=True, ex=USAGE_TTL)
    except redis.RedisError:
        pass
    return used


@dataclass
class Reservation:
    """Bytes counted against a user before a write; ``release`` gives them back if it fails."""

    user_id: int | None
    delta: int
    released: bool = False

    def release(self) -> None:
        if self.released or self.user_id is None or self.delta == 0:
            return
        self.released = True
        try:
            get_redis().eval(_RESERVE, 1, keys.s3_usage(self.user_id), -self.delta, 0)
        except redis.RedisError:
            usage_forget(self.user_id)


def _refuse(used: int, delta: int, quota: int) -> LimitError:
    return LimitError(
        "QuotaExceeded",
        f"This write of {delta} bytes would take your storage to {used + delta} bytes, past your "
        f"quota of {quota} bytes (S3_USER_QUOTA_BYTES). Delete objects to make room.", 403)


def quota_reserve(store: ObjectStore, *, user_id: int | None, prefix: str | None,
                  delta: int) -> Reservation:
    """Count ``delta`` more bytes (new size less the size replaced) against the user, or
    ``QuotaExceeded``. The service credential (``user_id`` None) has no quota."""
    quota = quota_bytes()
    if user_id is None or prefix is None or quota <= 0:
        return Reservation(None, 0)
    key = keys.s3_usage(user_id)
    for _ in range(2):
        try:
            done, used = get_redis().eval(_RESERVE, 1, key, delta, quota)
        except redis.RedisError as exc:
            # Without Redis the store's own figure decides (no reservation to undo).
            log.warning("s3 quota checked without its cache (Redis: %s)", type(exc).__name__)
            used = usage_from_store(store, prefix)
            if delta > 0 and used + delta > quota:
                raise _refuse(used, delta, quota) from None
            return Reservation(None, 0)
        if done == 1:
            return Reservation(user_id, delta)
        if done == 0:
            raise _refuse(int(used), delta, quota)
        usage_bytes(store, user_id, prefix)  # nothing cached: list the store, then try again
    used = usage_from_store(store, prefix)  # the cache vanished twice: decide without it
    if delta > 0 and used + delta > quota:
        raise _refuse(used, delta, quota)
    return Reservation(None, 0)


def quota_check(store: ObjectStore, *, user_id: int | None, prefix: str | None,
                more: int) -> None:
    """``QuotaExceeded`` if ``more`` bytes would not fit (parts of an unfinished upload, which
    are not objects yet, so are only checked, not counted)."""
    quota = quota_bytes()
    if user_id is None or prefix is None or quota <= 0:
        return
    used = usage_bytes(store, user_id, prefix)
    if more > 0 and used + more > quota:
        raise _refuse(used, more, quota)


def usage_forget(user_id: int | None) -> None:
    """Drop the cached usage (after deletes): the next write lists the store again."""
    if user_id is None:
        return
    try:
        get_redis().delete(keys.s3_usage(user_id))
    except redis.RedisError:
        log.warning("s3 usage cache of a user could not be dropped")
