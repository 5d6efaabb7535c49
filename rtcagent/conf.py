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
    "ORPHAN_AFTER": 10.0,  # seconds before a turn nobody runs is re-enqueued by the sweeper
    # Per-user caps on v1.message.send (and fork), answered rate_limited; 0 turns one off
    "MAX_QUEUED_TURNS_PER_USER": 20,  # messages waiting for their turn to start
    "MAX_TURNS_PER_HOUR": 600,  # turns started in the last hour, queued ones included
    "SHOW_RAW_ERRORS": False,  # debug.show_raw_errors: send raw_error in error messages
}


def rtc_setting(name: str) -> Any:
    """Return the knob ``name`` from ``settings.RTCAGENT``, falling back to the default."""
    overrides = getattr(settings, "RTCAGENT", {})
    if name in overrides:
        return overrides[name]
    return DEFAULTS[name]


def wire_limits() -> dict[str, int]:
    """The input limits every client is told at connect (``data.limits``) and the server
    enforces. A result must fit in a frame with its envelope, so its limit never exceeds the
    frame limit less a margin for the rest of the command."""
    frame = int(rtc_setting("MAX_FRAME_BYTES"))
    return {
        "max_frame_bytes": frame,
        "max_result_bytes": max(0, min(int(rtc_setting("MAX_RESULT_BYTES")), frame - 4096)),
        "max_json_depth": int(rtc_setting("MAX_JSON_DEPTH")),
    }
