"""Per-turn state in Redis: the checkpoint (TTL 24 h) and the cross-process stop signal."""

from __future__ import annotations

import json
from typing import Any

from rtcagent.redis import get_redis

CHECKPOINT_TTL = 24 * 3600
STOP_TTL = 3600


def _cp(turn_id: str) -> str:
    return f"rtc:turn:{{{turn_id}}}:checkpoint"


def _stop(turn_id: str) -> str:
    return f"rtc:turn:{{{turn_id}}}:stop"


def checkpoint_load(turn_id: str) -> dict[str, Any] | None:
    raw = get_redis().get(_cp(turn_id))
    return json.loads(raw) if raw else None


def checkpoint_save(turn_id: str, data: dict[str, Any]) -> None:
    get_redis().set(_cp(turn_id), json.dumps(data), ex=CHECKPOINT_TTL)


def checkpoint_delete(turn_id: str) -> None:
    get_redis().delete(_cp(turn_id))


def request_stop(turn_id: str) -> None:
    """Ask whichever process runs the turn to stop it (it polls while streaming)."""
    get_redis().set(_stop(turn_id), "1", ex=STOP_TTL)


def stop_requested(turn_id: str) -> bool:
    return bool(get_redis().exists(_stop(turn_id)))
