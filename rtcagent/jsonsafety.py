"""One check for every JSON value that enters the system: depth and NUL characters.

Why: orjson decodes documents nested up to 1024 levels but encodes at most 255, and PostgreSQL
``text``/``jsonb`` cannot hold U+0000. A value that passed the edge but cannot be stored or sent
back out breaks later, far from its cause (a committed message that no socket can encode, a write
retried forever). So every input (WebSocket frames, RPC params, HTTP bodies, tool arguments and
tool results) is checked here before anything is stored, and refused with a permanent
``InvalidRequest`` that names the path of the offending value.

``MAX_JSON_DEPTH`` (``RTCAGENT["MAX_JSON_DEPTH"]``, default 64) leaves room for the envelopes
the server wraps around stored values (a publication, an Update, its item) under orjson's 255.
"""

from __future__ import annotations

from typing import Any

from rtcagent.errors import InvalidRequest

NUL = "\x00"
REPLACEMENT = "\ufffd"


def max_depth() -> int:
    from rtcagent.conf import rtc_setting

    return int(rtc_setting("MAX_JSON_DEPTH"))


def _path(parts: list[str | int]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(root)"


def check_json(
    value: Any, *, what: str = "params", limit: int | None = None, allow_nul: bool = False
) -> None:
    """Raise ``InvalidRequest`` if ``value`` nests deeper than the limit or holds a NUL
    (unless ``allow_nul``: for values that ``scrub_nul`` cleans afterwards).

    Iterative (an explicit stack), so a hostile document cannot exhaust Python's recursion.
    A scalar is depth 0; ``{"a": 1}`` and ``[1]`` are depth 1.
    """
    limit = max_depth() if limit is None else limit
    stack: list[tuple[Any, int, list[str | int]]] = [(value, 0, [])]
    while stack:
        node, depth, path = stack.pop()
        if isinstance(node, str):
            if NUL in node and not allow_nul:
                raise InvalidRequest(
                    f"{what}: {_path(path)} contains a NUL character (U+0000), which cannot "
                    "be stored",
                    slug="invalid_request",
                )
            continue
        if isinstance(node, dict):
            if depth + 1 > limit:
                raise _too_deep(what, path, limit)
            for key, child in node.items():
                if isinstance(key, str) and NUL in key and not allow_nul:
                    raise InvalidRequest(
                        f"{what}: a key under {_path(path)} contains a NUL character (U+0000)"
                    )
                stack.append((child, depth + 1, [*path, str(key)]))
        elif isinstance(node, list | tuple):
            if depth + 1 > limit:
                raise _too_deep(what, path, limit)
            for i, child in enumerate(node):
                stack.append((child, depth + 1, [*path, i]))


def _too_deep(what: str, path: list[str | int], limit: int) -> InvalidRequest:
    return InvalidRequest(
        f"{what}: JSON nested deeper than {limit} levels at {_path(path)}",
        slug="invalid_request",
    )


def scrub_nul(value: Any) -> Any:
    """A copy of ``value`` with every NUL replaced by U+FFFD (for text we must keep, such as
    a model's output or a file read by a tool, where refusing would lose the whole value).
    Recursive: call it only on values that passed ``check_json``'s depth limit."""
    if isinstance(value, str):
        return value.replace(NUL, REPLACEMENT) if NUL in value else value
    if isinstance(value, dict):
        return {scrub_nul(k): scrub_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_nul(v) for v in value]
    return value
