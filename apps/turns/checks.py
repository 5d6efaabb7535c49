"""System check: the configured Redis must never evict (``maxmemory-policy noeviction``).

Redis holds the session queue, the session locks and their leases, the topic offsets and
epochs, and the fast copies of checkpoints and stop flags. A policy that evicts drops any of them
silently when memory runs short: an evicted lock lets two workers run one session, an evicted
queue item leaves its work to the sweeper, an evicted epoch makes every client of that user
reload. Under ``noeviction`` a full Redis refuses writes instead (``OOM command not allowed``):
loud, nothing stored is lost, and the work resumes once memory is available.

``manage.py check`` (and ``check --deploy``) reports another policy as a warning under DEBUG and
as an error otherwise; ``rtc_worker`` refuses to start either way.
"""

from __future__ import annotations

from typing import Any

import redis
from django.conf import settings
from django.core import checks

from rtcagent.redis import get_redis

REQUIRED_POLICY = "noeviction"
HINT = (
    "Run CONFIG SET maxmemory-policy noeviction and put 'maxmemory-policy noeviction' in "
    "redis.conf (on a managed Redis: its parameter group or plan settings). A full Redis then "
    "refuses writes, which the worker logs and recovers from; it never drops stored state."
)


def redis_memory_policy(client: redis.Redis | None = None) -> tuple[str, int]:
    """The server's ``maxmemory-policy`` and ``maxmemory`` (bytes, 0 for no limit).

    Read from ``INFO memory``, which managed services allow where ``CONFIG`` is disabled."""
    info = (client or get_redis()).info("memory")
    return str(info.get("maxmemory_policy", "")), int(info.get("maxmemory", 0))


def eviction_problem(policy: str, maxmemory: int) -> str:
    """What is wrong with ``policy`` (an empty string when nothing is)."""
    if policy == REQUIRED_POLICY:
        return ""
    limit = f"maxmemory {maxmemory} bytes" if maxmemory else "no maxmemory set yet"
    return (
        f"Redis at {_where()} has maxmemory-policy {policy or '(unknown)'} ({limit}): when "
        "memory runs short it silently evicts queue items, session locks, topic epochs and "
        f"checkpoint copies. rtcagent needs maxmemory-policy {REQUIRED_POLICY}."
    )


def _where() -> str:
    url = str(settings.REDIS_URL)
    return url.rsplit("@", 1)[-1]  # never the password


@checks.register("redis")
def check_redis_never_evicts(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    try:
        problem = eviction_problem(*redis_memory_policy())
    except redis.RedisError as exc:
        return [
            checks.Warning(
                f"Could not ask Redis at {_where()} for its maxmemory-policy: {exc}",
                hint=f"rtcagent needs maxmemory-policy {REQUIRED_POLICY}. " + HINT,
                id="turns.W002",
            )
        ]
    if not problem:
        return []
    if settings.DEBUG:
        return [checks.Warning(problem, hint=HINT, id="turns.W001")]
    return [checks.Error(problem, hint=HINT, id="turns.E001")]
