"""The browser tools offered to the model, their classes, and the work-mode approval table.

Schemas follow protocol.md §6 (OpenAI function-calling format). Host pages register more
functions (class ``read``, ``write`` or ``script``) through the widget; they are offered the same
way. Deadlines: 5 minutes, 30 for ``askUser`` (a person answers it).
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

READ, WRITE, SCRIPT, ASK = "read", "write", "script", "ask"

_str = {"type": "string"}
_int = {"type": "integer", "minimum": 0}


def _fn(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": required,
                           "additionalProperties": False},
        },
    }


_question = {
    "type": "object",
    "properties": {
        "question": _str,
        "header": {"type": "string", "maxLength": 12},
        "options": {
            "type": "array", "minItems": 2, "maxItems": 4,
            "items": {"type": "object", "properties": {"label": _str, "description": _str},
                      "required": ["label"]},
        },
        "multiSelect": {"type": "boolean"},
    },
    "required": ["question", "header", "options"],
}

BROWSER_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "ls": (READ, _fn("ls", "List a directory of the user's virtual file system.",
                     {"path": _str}, [])),
    "read": (READ, _fn("read", "Read a file; lines are numbered. Use offset/limit to page.",
                       {"path": _str, "offset": _int, "limit": _int}, ["path"])),
    "write": (WRITE, _fn("write", "Write a whole file (creates or overwrites).",
                         {"path": _str, "content": _str}, ["path", "content"])),
    "edit": (WRITE, _fn("edit", "Replace old_string by new_string in a file read before; fails "
                        "when old_string is missing or not unique unless replace_all.",
                        {"path": _str, "old_string": _str, "new_string": _str,
                         "replace_all": {"type": "boolean"}},
                        ["path", "old_string", "new_string"])),
    "grep": (READ, _fn("grep", "Search file contents with a regular expression; file:line results.",
                       {"pattern": _str, "path": _str, "caseSensitive": {"type": "boolean"}},
                       ["pattern"])),
    "find": (READ, _fn("find", "Find files by glob pattern.",
                       {"pattern": _str, "path": _str}, ["pattern"])),
    "script": (SCRIPT, _fn("script", "Run JavaScript in an isolated sandbox in the user's browser "
                           "(save a named script, run a saved one with params, or eval code).",
                           {"action": {"type": "string", "enum": ["save", "run", "eval"]},
                            "code": _str, "name": _str, "params": {"type": "object"}},
                           ["action"])),
    "askUser": (ASK, _fn("askUser", "Ask the user 1-4 multiple-choice questions; an 'Other' "
                         "free-text answer is always allowed.",
                         {"questions": {"type": "array", "minItems": 1, "maxItems": 4,
                                        "items": _question}},
                         ["questions"])),
}

APPROVAL: dict[str, dict[str, bool]] = {
    #         manual  edit   plan   auto   bypass
    READ: dict(manual=False, edit=False, plan=False, auto=False, bypass=False),
    WRITE: dict(manual=True, edit=False, plan=True, auto=False, bypass=False),
    SCRIPT: dict(manual=True, edit=True, plan=True, auto=True, bypass=False),
    ASK: dict(manual=False, edit=False, plan=False, auto=False, bypass=False),
}


def tool_class(name: str) -> str | None:
    entry = BROWSER_TOOLS.get(name)
    return entry[0] if entry else None


def needs_approval(tool_name: str, work_mode: str, *, klass: str | None = None) -> bool:
    """Whether the user must approve this call first (protocol.md §6 table)."""
    klass = klass or tool_class(tool_name) or SCRIPT  # unknown host functions: treat as script
    return APPROVAL[klass].get(work_mode, True)


def deadline_for(tool_name: str) -> timedelta:
    """How long the browser has (``RTC_DEADLINE_SECONDS``, askUser ``RTC_ASK_DEADLINE_SECONDS``)."""
    from rtcagent.conf import rtc_setting

    name = "ASK_DEADLINE_SECONDS" if tool_name == "askUser" else "DEADLINE_SECONDS"
    return timedelta(seconds=float(rtc_setting(name)))


def schemas() -> list[dict[str, Any]]:
    return [schema for _, schema in BROWSER_TOOLS.values()]


def output_for_model(status: str, result: Any, error: str) -> str:
    """The text the model sees for a finished (or unfinished) RTC (protocol.md §6)."""
    if status == "completed":
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
    if status == "failed":
        return f"[Tool Error] {error or 'the tool failed'}"
    if status == "timeout":
        return "[Tool Timeout]"
    if status == "rejected":
        return f"[Tool Rejected] {error}".rstrip()
    return "[Tool Pending]"


HOST_FUNCTIONS_MAX = 32
_NAME = re.compile(r"^[A-Za-z_][\w-]{0,63}$")


def validate_host_functions(value: Any) -> list[dict[str, Any]]:
    """Check the page's functions (``[{name, description, parameters, class}]``); raise
    ``ValueError`` naming the problem. Names may not shadow a built-in tool."""
    if not isinstance(value, list) or len(value) > HOST_FUNCTIONS_MAX:
        raise ValueError(f"must be a list of at most {HOST_FUNCTIONS_MAX} functions")
    out, seen = [], set()
    for fn in value:
        if not isinstance(fn, dict):
            raise ValueError("each function must be an object")
        name = fn.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"invalid function name {name!r}")
        if name in BROWSER_TOOLS or name in seen:
            raise ValueError(f"function name {name!r} is taken")
        klass = fn.get("class", SCRIPT)
        if klass not in (READ, WRITE, SCRIPT):
            raise ValueError(f"{name}: class must be read, write or script")
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(params, dict) or len(json.dumps(params)) > 8000:
            raise ValueError(f"{name}: parameters must be a JSON Schema object under 8 KB")
        description = fn.get("description", "")
        if not isinstance(description, str) or len(description) > 2000:
            raise ValueError(f"{name}: description must be a string under 2000 characters")
        seen.add(name)
        out.append({"name": name, "description": description, "parameters": params,
                    "class": klass})
    return out


def host_schemas(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The page's functions in the model's tool format."""
    return [
        {"type": "function", "function": {
            "name": fn["name"], "description": fn["description"] or f"Host function {fn['name']}",
            "parameters": fn["parameters"]}}
        for fn in functions
    ]
