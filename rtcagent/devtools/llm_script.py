"""The script behind the scripted LLM: replies, rules and how a request picks its reply.

Invariants:

* A reply is validated when it is added (``normalize_reply``): an unknown key or a wrong type is a
  ``ValueError`` at enqueue time, never a surprise in the middle of a test.
* ``Script.pick`` is thread-safe and consumes at most one reply per request. Rules are tried first,
  in the order they were added (a rule with ``times`` is dropped once used up); then the queue, in
  order; when both are exhausted the ``DEFAULT_REPLY`` answers, so a client never waits forever.
* Conditions describe what the model is answering *now*: ``last_user_contains`` only matches while
  the last message is that user message, and ``last_tool_result_contains`` only while the
  conversation ends with tool results; system messages after the conversation (the prompt's
  volatile tail: recalled memory, goal and todo reminders) are not counted. A rule that calls a
  tool therefore does not fire again on the follow-up request that carries the tool result (no
  accidental loops in demos).
* Text matching is case-insensitive substring matching.
"""

from __future__ import annotations

import copy
import json
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_REPLY: dict[str, Any] = {"content": "(scripted LLM: no reply left)"}

_REPLY_KEYS = {
    "content",
    "reasoning",
    "tool_calls",
    "usage",
    "chunk_size",
    "chunk_delay",
    "finish_reason",
    "error",
    "malformed",
    "disconnect_after",
    "hang",
}
_ERROR_KEYS = {"status", "type", "code", "message", "param", "retry_after"}
_USAGE_KEYS = {
    "prompt_tokens", "completion_tokens", "cached_tokens", "cache_write_tokens", "reasoning_tokens",
}
_WHEN_KEYS = {
    "last_user_contains",
    "any_user_contains",
    "last_tool_result_contains",
    "last_role",
    "system_contains",
    "model",
    "tool_offered",
}
_FINISH_REASONS = {"stop", "length", "tool_calls", "content_filter"}
_DEFAULT_ERROR_TYPE = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "rate_limit_error",
}


def _check_keys(kind: str, given: dict[str, Any], allowed: set[str]) -> None:
    unknown = set(given) - allowed
    if unknown:
        raise ValueError(f"unknown {kind} key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")


def normalize_reply(reply: dict[str, Any]) -> dict[str, Any]:
    """Validate ``reply`` and return a deep copy with defaults filled in (tool-call ids, types)."""
    if not isinstance(reply, dict):
        raise ValueError(f"a reply must be a JSON object, got {type(reply).__name__}")
    _check_keys("reply", reply, _REPLY_KEYS)
    out = copy.deepcopy(reply)
    for key in ("content", "reasoning"):
        if key in out and not isinstance(out[key], str):
            raise ValueError(f"reply {key!r} must be a string")
    calls = []
    for n, call in enumerate(out.get("tool_calls") or []):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ValueError("each tool call needs a string 'name'")
        _check_keys("tool call", call, {"id", "name", "arguments"})
        arguments = call.get("arguments", {})
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, separators=(",", ":"))
        calls.append({"id": call.get("id") or f"call_{n}", "name": call["name"], "args": arguments})
    if calls:
        out["tool_calls"] = calls
    else:
        out.pop("tool_calls", None)
    if "usage" in out:
        _check_keys("usage", out["usage"], _USAGE_KEYS)
    if "error" in out:
        error = out["error"]
        if not isinstance(error, dict) or not isinstance(error.get("status"), int):
            raise ValueError("'error' needs an integer 'status'")
        _check_keys("error", error, _ERROR_KEYS)
        error.setdefault("type", _DEFAULT_ERROR_TYPE.get(error["status"], "server_error"))
        error.setdefault("code", None)
        error.setdefault("message", f"scripted error {error['status']}")
    if out.get("finish_reason") not in (None, *_FINISH_REASONS):
        raise ValueError(f"finish_reason must be one of {sorted(_FINISH_REASONS)}")
    for key in ("chunk_size", "disconnect_after"):
        if key in out and (not isinstance(out[key], int) or out[key] < 0):
            raise ValueError(f"{key!r} must be a non-negative integer")
    for key in ("chunk_delay", "hang"):
        if key in out and (not isinstance(out[key], int | float) or out[key] < 0):
            raise ValueError(f"{key!r} must be a non-negative number of seconds")
    return out


def message_text(message: dict[str, Any]) -> str:
    """The text of a chat message whether ``content`` is a string or a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _contains(haystack: str, needle: str) -> bool:
    return needle.lower() in haystack.lower()


def matches(when: dict[str, Any], body: dict[str, Any]) -> bool:
    """True when every condition of ``when`` holds for the request ``body``."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    # What the model answers now ends before the prompt's volatile tail: system messages after
    # the conversation (recalled memory, goal and todo reminders) are context, not the question.
    end = len(messages)
    while end > 1 and messages[end - 1].get("role") == "system":
        end -= 1
    last = messages[end - 1] if end else {}
    for key, expected in when.items():
        if key == "last_user_contains":
            ok = last.get("role") == "user" and _contains(message_text(last), expected)
        elif key == "any_user_contains":
            ok = any(
                m.get("role") == "user" and _contains(message_text(m), expected) for m in messages
            )
        elif key == "last_tool_result_contains":
            tail = []
            for m in reversed(messages[:end]):
                if m.get("role") != "tool":
                    break
                tail.append(m)
            ok = any(_contains(message_text(m), expected) for m in tail)
        elif key == "last_role":
            ok = last.get("role") == expected
        elif key == "system_contains":
            ok = any(
                m.get("role") in ("system", "developer") and _contains(message_text(m), expected)
                for m in messages
            )
        elif key == "model":
            ok = body.get("model") == expected
        elif key == "tool_offered":
            names = {
                (t.get("function") or {}).get("name")
                for t in body.get("tools") or []
                if isinstance(t, dict)
            }
            ok = expected in names
        else:  # pragma: no cover - rejected by add_rule
            ok = False
        if not ok:
            return False
    return True


@dataclass
class _Rule:
    when: dict[str, Any]
    reply: dict[str, Any]
    times: int | None


class Script:
    """A thread-safe store of queued replies and rules."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[dict[str, Any]] = deque()
        self._rules: list[_Rule] = []

    def enqueue(self, reply: dict[str, Any]) -> None:
        """Append one reply to the queue (validated now)."""
        normalized = normalize_reply(reply)
        with self._lock:
            self._queue.append(normalized)

    def add_rule(
        self, when: dict[str, Any], reply: dict[str, Any], *, times: int | None = None
    ) -> None:
        """Answer ``reply`` to every request matching ``when`` (at most ``times`` times)."""
        if not isinstance(when, dict) or not when:
            raise ValueError("'when' must be a non-empty object")
        _check_keys("when", when, _WHEN_KEYS)
        normalized = normalize_reply(reply)
        with self._lock:
            self._rules.append(_Rule(dict(when), normalized, times))

    def load(self, script: dict[str, Any] | list[Any]) -> None:
        """Add the replies and rules of a script object (a list is a list of replies)."""
        if isinstance(script, list):
            script = {"replies": script}
        _check_keys("script", script, {"replies", "rules", "chunk_delay", "model"})
        for reply in script.get("replies", []):
            self.enqueue(reply)
        for rule in script.get("rules", []):
            _check_keys("rule", rule, {"when", "reply", "times"})
            self.add_rule(rule["when"], rule["reply"], times=rule.get("times"))

    def clear(self) -> None:
        with self._lock:
            self._queue.clear()
            self._rules.clear()

    def pending(self) -> int:
        """How many queued replies are left (rules not counted)."""
        with self._lock:
            return len(self._queue)

    def pick(self, body: dict[str, Any]) -> dict[str, Any]:
        """Consume and return the reply for the request ``body``."""
        with self._lock:
            for rule in self._rules:
                if matches(rule.when, body):
                    if rule.times is not None:
                        rule.times -= 1
                        if rule.times <= 0:
                            self._rules.remove(rule)
                    return copy.deepcopy(rule.reply)
            if self._queue:
                return self._queue.popleft()
        return copy.deepcopy(DEFAULT_REPLY)


def read_script_file(path: str | Path) -> dict[str, Any]:
    """Load a JSON script file (an object, or a bare list of replies)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, list):
        return {"replies": data}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a script is a JSON object or a list of replies")
    return data
