"""Names of channels, channel-layer groups and Redis keys: defined here and nowhere else.

``tests/test_keys.py`` pins the formats; changing one breaks running clients or stored state.
"""

from __future__ import annotations

PREFIX = "rtc"

_scopes: dict[str, str] = {}


def pubsub_scope() -> str:
    """``db<n>`` of ``REDIS_URL``: keys live in one database, but pub/sub channels are the whole
    server's, so two deployments (or test processes) on one server with different databases
    would hear each other's channels (the same user ids: another user's chunks and bells).
    Every pub/sub channel name carries the database."""
    from django.conf import settings

    url = settings.REDIS_URL
    found = _scopes.get(url)
    if found is None:
        from redis.connection import parse_url

        found = _scopes[url] = f"db{int(parse_url(url).get('db') or 0)}"
    return found


def topic_channel(user_id: int) -> str:
    """Centrifuge channel of a user's durable Update stream."""
    return f"topic:u={user_id}"


def live_channel(user_id: int) -> str:
    """Centrifuge channel of a user's at-most-once stream (LLM chunks)."""
    return f"live:u={user_id}"


def live_bus(user_id: int) -> str:
    """Redis pub/sub channel of a user's live frames (LLM chunks, pre-encoded): the worker
    publishes, every web process with a socket of that user subscribes
    (``apps.gateway.livebus``)."""
    return f"{PREFIX}:{pubsub_scope()}:live:{{{user_id}}}"


def user_group(user_id: int) -> str:
    """Channel-layer group for control messages to all of a user's connections."""
    return f"user.u.{user_id}"


def topic_epoch(user_id: int) -> str:
    return f"{PREFIX}:topic:{{{user_id}}}:epoch"


def topic_offset(user_id: int) -> str:
    return f"{PREFIX}:topic:{{{user_id}}}:offset"


def topic_pending(user_id: int) -> str:
    """Sorted set of offsets allocated but not yet seen committed (score: allocation time)."""
    return f"{PREFIX}:topic:{{{user_id}}}:pending"


def topic_pending_users() -> str:
    """Set of user ids that have pending allocations (where the gap filler looks)."""
    return f"{PREFIX}:topic:pending-users"


def process_report(kind: str, process_id: str) -> str:
    """A process's latest report (JSON, with a TTL): ``kind`` is ``worker`` or ``web``."""
    return f"{PREFIX}:ops:{kind}:{process_id}"


def process_index(kind: str) -> str:
    """Sorted set of the processes of a kind that reported (score: time of the last report)."""
    return f"{PREFIX}:ops:{kind}s"


def s3_rate(user_id: int, window: int) -> str:
    """Counter of a user's ``/s3/`` requests in one fixed window (``window``: epoch minutes)."""
    return f"{PREFIX}:s3:{{{user_id}}}:rate:{window}"


def s3_usage(user_id: int) -> str:
    """A user's stored bytes under their prefix: a cache of the store's listing, with a TTL."""
    return f"{PREFIX}:s3:{{{user_id}}}:usage"


def context_state(session_id: object) -> str:
    """Hash of a session's context bookkeeping (microcompact offsets, the last request's
    prefix, warm-cache time): ``apps.turns.context``."""
    return f"{PREFIX}:ctx:{{{session_id}}}"


def compaction_pending(session_id: object) -> str:
    """Set while a manual compaction of the session is queued or running (one at a time)."""
    return f"{PREFIX}:compact:{{{session_id}}}"


MEMORY_JOBS = f"{PREFIX}:mem:x"
MEMORY_JOBS_PENDING = f"{MEMORY_JOBS}:pending"  # sorted set of sessions waiting for extraction
MEMORY_JOBS_RUNNING = f"{MEMORY_JOBS}:running"  # sorted set scored by lease deadline


def memory_job_lock(session_id: object) -> str:
    """The lease of a session's running extraction (its runner's token). The claim script in
    ``apps.memory.jobs`` builds the same name in Lua."""
    return f"{MEMORY_JOBS}:{{{session_id}}}:lock"


def live_interrupts() -> str:
    """Redis pub/sub channel on which a live call's input asks the worker streaming that call's
    turn to drop the stream now (``apps.live.interrupts``): the message is the turn id."""
    return f"{PREFIX}:{pubsub_scope()}:live:interrupts"
