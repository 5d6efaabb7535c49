"""Centrifuge client protocol v2 (JSON): codes, frame parsing and reply shapes.

Pure functions, no I/O. The consumer uses them; ``docs/protocol.md`` lists the same codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from rtcagent.errors import RtcError

COMMANDS = frozenset(
    {
        "connect", "subscribe", "unsubscribe", "publish", "presence", "presence_stats",
        "history", "ping", "send", "rpc", "refresh", "sub_refresh",
    }
)

# Reply error codes (Centrifuge's own; application codes are 400-1999, see rtcagent.errors).
ERR_INTERNAL = 100  # temporary: clients retry
ERR_PERMISSION_DENIED = 103
ERR_METHOD_NOT_FOUND = 104
ERR_BAD_REQUEST = 107
ERR_NOT_AVAILABLE = 108
ERR_TOKEN_EXPIRED = 109
ERR_TOO_MANY_REQUESTS = 111
ERR_UNRECOVERABLE_POSITION = 112

# Disconnect codes (close frame + push.disconnect). 3000-3499 reconnect, 3500-3999 do not.
DISCONNECT_SHUTDOWN = 3001
DISCONNECT_SERVER_ERROR = 3004
DISCONNECT_EXPIRED = 3005
DISCONNECT_SLOW = 3008
DISCONNECT_INSUFFICIENT_STATE = 3010
DISCONNECT_NO_PONG = 3012
DISCONNECT_INVALID_TOKEN = 3500
DISCONNECT_BAD_REQUEST = 3501
DISCONNECT_FORCE = 3503
DISCONNECT_PERMISSION_DENIED = 3507

DISCONNECT_REASONS = {
    DISCONNECT_SHUTDOWN: "shutdown",
    DISCONNECT_SERVER_ERROR: "internal server error",
    DISCONNECT_EXPIRED: "connection expired",
    DISCONNECT_SLOW: "slow",
    DISCONNECT_INSUFFICIENT_STATE: "insufficient state",
    DISCONNECT_NO_PONG: "no pong",
    DISCONNECT_INVALID_TOKEN: "invalid token",
    DISCONNECT_BAD_REQUEST: "bad request",
    DISCONNECT_FORCE: "force disconnect",
    DISCONNECT_PERMISSION_DENIED: "permission denied",
}


class ProtocolViolation(Exception):
    """The peer broke the protocol; the connection is closed with ``code``."""

    def __init__(self, code: int = DISCONNECT_BAD_REQUEST, reason: str = "") -> None:
        self.code = code
        self.reason = reason or DISCONNECT_REASONS.get(code, "bad request")
        super().__init__(self.reason)


@dataclass(frozen=True)
class Command:
    id: int
    method: str  # one of COMMANDS, or "" for an empty command (a pong)
    params: dict[str, Any]


def parse_frame(text: str, *, max_commands: int) -> list[Command]:
    """Split a text frame into commands (one JSON object per line).

    Raises ``ProtocolViolation`` for bad JSON, a non-object, a bad id, zero or several methods,
    an unknown method, or id 0 on anything but ``send``.
    """
    lines = [line for line in text.split("\n") if line.strip()]
    if len(lines) > max_commands:
        raise ProtocolViolation(reason="too many commands in one frame")
    out: list[Command] = []
    for line in lines:
        try:
            raw = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise ProtocolViolation(reason="bad request: invalid JSON") from None
        if not isinstance(raw, dict):
            raise ProtocolViolation(reason="bad request: command is not an object")
        cid = raw.pop("id", 0)
        if isinstance(cid, bool) or not isinstance(cid, int) or cid < 0 or cid > 2**32 - 1:
            raise ProtocolViolation(reason="bad request: invalid id")
        if not raw:
            if cid:
                raise ProtocolViolation(reason="bad request: empty command with id")
            out.append(Command(0, "", {}))
            continue
        if len(raw) != 1:
            raise ProtocolViolation(reason="bad request: one method per command")
        (method, params), = raw.items()
        if method not in COMMANDS:
            raise ProtocolViolation(reason="bad request: unknown command")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise ProtocolViolation(reason="bad request: params must be an object")
        if cid == 0 and method != "send":
            raise ProtocolViolation(reason="bad request: missing id")
        out.append(Command(cid, method, params))
    return out


def encode(*objs: dict[str, Any]) -> str:
    """One frame: the objects, one JSON document per line."""
    return "\n".join(orjson.dumps(o).decode() for o in objs)


def reply(cid: int, method: str, result: dict[str, Any]) -> dict[str, Any]:
    return {"id": cid, method: result}


def error(cid: int, code: int, message: str, *, temporary: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if temporary:
        body["temporary"] = True
    return {"id": cid, "error": body}


def app_error(cid: int, exc: RtcError) -> dict[str, Any]:
    """Map a domain error to a Centrifuge error reply (the one place that does)."""
    message = f"{exc.slug}: {exc.message}"
    if exc.details:
        message += " | " + orjson.dumps(exc.details).decode()
    return error(cid, exc.code, message, temporary=exc.temporary)


def disconnect_push(code: int, reason: str) -> dict[str, Any]:
    return {"push": {"disconnect": {"code": code, "reason": reason}}}


def publication_push(channel: str, data: Any, offset: int | None = None) -> dict[str, Any]:
    pub: dict[str, Any] = {"data": data}
    if offset is not None:
        pub["offset"] = offset
    return {"push": {"channel": channel, "pub": pub}}
