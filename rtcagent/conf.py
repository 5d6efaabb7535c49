"""One accessor for the app's knobs: ``settings.RTCAGENT`` merged over these defaults."""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Centrifuge transport
    "PING_INTERVAL": 25.0,  # seconds between server pings ({}); clients allow +10 s
    "PONG_TIMEOUT": 10.0,  # a pong must arrive within this after a ping, else close 3012
    "CONNECT_TIMEOUT": 10.0,  # first command must be connect within this, else close 3501
    "MAX_FRAME_BYTES": 4 * 1024 * 1024,  # larger text frames are refused with disconnect 3501
    "MAX_COMMANDS_PER_FRAME": 100,
    "SLOW_CLIENT_BYTES": 8 * 1024 * 1024,  # unread bytes that trigger a probe ping (then 3008)
    "MAX_JSON_DEPTH": 64,  # deeper JSON anywhere (frames, params, bodies, tool I/O) is refused
    "EXPIRED_CLOSE_DELAY": 25.0,  # a connection not refreshed by exp + this is closed (3005)
    # Topic stream
    "RECOVERY_LIMIT": 1000,  # at most this many publications are replayed on reconnect
    "RECOVERY_MAX_BYTES": 16 * 1024 * 1024,  # ... and at most this much (else: reload)
    "REORDER_WAIT": 1.0,  # how long a hole on the live path may stay before the DB is asked
    "GAP_GRACE": 2.0,  # an allocated offset older than this with no row is a rolled-back one
    "HISTORY_MAX_LIMIT": 1000,
    "TOPIC_RETENTION_HOURS": 72.0,  # older publications are pruned (clients that far behind reload)
    # RPC paging
    "PAGE_MAX": 200,
    # Remote tool calls
    "DEADLINE_SECONDS": 300.0,  # an unfinished RTC becomes "timeout" after this
    "ASK_DEADLINE_SECONDS": 1800.0,  # askUser waits for a person
    "MAX_RESULT_BYTES": 2 * 1024 * 1024,  # a larger tool result fails the call (the model is told)
    # Worker
    "WORKER_LEASE_MS": 30_000,  # a session lock's lease; renewed every third of it
    "WORKER_TURNS": 4,  # turns (sessions) one worker process runs at once, one thread each
    "ORPHAN_AFTER": 10.0,  # seconds before a turn nobody runs is re-enqueued by the sweeper
    # seconds a worker waits, turn in hand, for a browser tool's result before it lets the turn
    # go (interrupted); 0: never waits
    "RESULT_WAIT": 1.0,
    # a worker waiting so may take the result before its commit, ask the model meanwhile and
    # show nothing until the commit confirms it (apps.turns.queue: early results)
    "EARLY_RESULTS": True,
    # Per-user caps on v1.message.send (and fork), answered rate_limited; 0 turns one off
    "MAX_QUEUED_TURNS_PER_USER": 20,  # messages waiting for their turn to start
    "MAX_TURNS_PER_HOUR": 600,  # turns started in the last hour, queued ones included
    "SHOW_RAW_ERRORS": False,  # debug.show_raw_errors: send raw_error in error messages
    # Object store and /s3/ (apps.storage)
    "S3_CREDENTIAL_TTL": 12 * 3600,  # seconds a temporary credential lives
    "S3_CLOCK_SKEW": 900,  # SigV4: a request's X-Amz-Date may differ from ours by this much
    "S3_REQUESTS_PER_MINUTE": 300,  # per user, answered SlowDown beyond
    "S3_USER_QUOTA_BYTES": 1024**3,  # stored bytes per user prefix
    "S3_MAX_OBJECT_BYTES": 100 * 1024**2,  # one object (or one multipart object) at most
    "PRESIGN_DEFAULT_EXPIRES": 3600,
    "PRESIGN_MAX_EXPIRES": 604800,
    "UNSENT_UPLOAD_TTL_HOURS": 24.0,  # an upload under uploads/ no message names is then deleted
    # Attachments (apps.attachments)
    "ATTACH_TEXT_MAX_BYTES": 256 * 1024,  # text files are cut here, on a character boundary
    "ATTACH_IMAGE_MAX_SIDE": 2000,  # images are fitted within this square
    "ATTACH_IMAGE_MAX_BASE64": 5 * 1024 * 1024,  # the JPEG quality ladder stops below this
    "ATTACH_IMAGE_MAX_PIXELS": 50_000_000,  # larger images are refused as decompression bombs
    "ATTACH_MAX_FILES": 10,  # per message
    "ATTACH_POOL_WORKERS": 2,  # image processes (nice +10) per worker process
    "ATTACH_JOB_TIMEOUT": 30.0,  # seconds one image may take; then it is skipped with a warning
    "ATTACH_JOB_MEMORY_BYTES": 1536 * 1024**2,  # RLIMIT_AS of an image process
}


def rtc_setting(name: str) -> Any:
    """Return the knob ``name`` from ``settings.RTCAGENT``, falling back to the default."""
    overrides = getattr(settings, "RTCAGENT", {})
    if name in overrides:
        return overrides[name]
    return DEFAULTS[name]


def app_setting(name: str, defaults: dict[str, Any]) -> Any:
    """An app's own knob: ``settings.RTCAGENT[name]``, else the environment's ``RTC_<name>``
    (cast to the default's type), else ``defaults[name]``."""
    import os

    overrides = getattr(settings, "RTCAGENT", {})
    if name in overrides:
        return overrides[name]
    default = defaults[name]
    raw = os.environ.get(f"RTC_{name}", "").strip()
    return type(default)(raw) if raw else default


def wire_limits() -> dict[str, int]:
    """The input limits every client is told at connect (``data.limits``) and the server
    enforces. A result must fit in a frame with its envelope, so its limit never exceeds the
    frame limit less a margin for the rest of the command."""
    frame = int(rtc_setting("MAX_FRAME_BYTES"))
    return {
        "max_frame_bytes": frame,
        "max_result_bytes": max(0, min(int(rtc_setting("MAX_RESULT_BYTES")), frame - 4096)),
        "max_json_depth": int(rtc_setting("MAX_JSON_DEPTH")),
        "max_attachment_bytes": int(rtc_setting("S3_MAX_OBJECT_BYTES")),
        "max_attachments": int(rtc_setting("ATTACH_MAX_FILES")),
    }
