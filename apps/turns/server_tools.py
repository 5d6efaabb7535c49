"""The server-tool registry: tools the model calls that run in the worker, not the browser.

Each app owns its tools in one ``tools.py`` module, one ``ServerTool`` per tool (name, schema,
approval class, handler), registered with ``register``; ``autodiscover`` imports every installed
app's ``tools`` module at start-up (``apps.memory.apps.MemoryConfig.ready``), and a name taken
twice, or taken by a browser tool, fails there.

Invariants:

* ``schemas()`` is sorted by name, so the tool list the model is sent is byte-identical from
  one call to the next (it is part of the prompt's cached prefix).
* ``run`` never hands a handler arguments its schema refuses: they are validated first (JSON
  Schema, draft 2020-12) and refused with a text the model reads, starting ``[Tool Error]``.
  A handler's refusal (``ToolError``, or a domain error such as ``NotFound``) becomes such a
  text as well; anything else propagates (the engine reports it, the worker keeps a database
  failure's item for a retry).
* A handler is synchronous, runs inside the worker with the ORM, and returns the text the model
  sees, or a ``Deferred``: the result comes later (a sync sub-agent). The engine then goes on
  with the answer's other calls and waits, checkpointed as for an RTC, until every deferred
  result of the answer is in (``ports.deferred_outcome(ref)``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from apps.turns.engine import Deferred  # a handler's "the result comes later"
from rtcagent.errors import RtcError

__all__ = ["Deferred", "ServerTool", "ToolContext", "ToolError", "register", "run"]

APPROVALS = ("auto", "ask")  # "ask": the user approves each call first (as write tools do)


@dataclass(frozen=True)
class ToolContext:
    """Who the call is for: the turn's user, session, turn and the call's message."""

    user_id: int
    session_id: str
    turn_id: str
    message_id: str | None = None


Handler = Callable[[ToolContext, dict[str, Any]], "str | Deferred"]


@dataclass(frozen=True)
class ServerTool:
    name: str
    description: str
    parameters: dict[str, Any]  # a JSON Schema object
    approval: str  # "auto" | "ask"
    handler: Handler

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema of the tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class ToolError(Exception):
    """A handler's refusal; ``run`` answers ``[Tool Error] <message>``."""


_registry: dict[str, ServerTool] = {}
_validators: dict[str, Draft202012Validator] = {}
_discovered = False


def register(tool: ServerTool) -> ServerTool:
    """Add ``tool``; a second tool with its name, or a bad schema, raises ``RuntimeError``."""
    from apps.rtc.tools import BROWSER_TOOLS

    if _registry.get(tool.name) is tool:
        return tool
    if tool.name in _registry or tool.name in BROWSER_TOOLS:
        raise RuntimeError(f"server tool {tool.name!r} registered twice")
    if tool.approval not in APPROVALS:
        raise RuntimeError(f"server tool {tool.name!r}: approval must be one of {APPROVALS}")
    try:
        Draft202012Validator.check_schema(tool.parameters)
    except SchemaError as exc:
        raise RuntimeError(f"server tool {tool.name!r}: bad schema: {exc.message}") from None
    if tool.parameters.get("type") != "object":
        raise RuntimeError(f"server tool {tool.name!r}: parameters must be an object schema")
    _registry[tool.name] = tool
    _validators[tool.name] = Draft202012Validator(tool.parameters)
    return tool


def autodiscover() -> None:
    """Import every installed app's ``tools`` module (once)."""
    global _discovered
    if _discovered:
        return
    from django.utils.module_loading import autodiscover_modules

    autodiscover_modules("tools")
    _discovered = True


def get(name: str) -> ServerTool | None:
    autodiscover()
    return _registry.get(name)


def names() -> list[str]:
    autodiscover()
    return sorted(_registry)


def schemas() -> list[dict[str, Any]]:
    """The OpenAI tool schemas of every server tool, sorted by name."""
    autodiscover()
    return [_registry[name].schema() for name in sorted(_registry)]


def _where(error: Any) -> str:
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return path.lstrip(".") or "arguments"


def _short(text: str, limit: int = 200) -> str:
    # jsonschema quotes the offending value: an 8,000-character string must not come back whole.
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run(name: str, ctx: ToolContext, arguments: dict[str, Any]) -> str | Deferred:
    """Validate ``arguments`` and run the tool; the text the model sees (or ``Deferred``)."""
    tool = get(name)
    if tool is None:
        return f"[Tool Error] unknown tool {name!r}"
    if not isinstance(arguments, dict):
        return f"[Tool Error] invalid arguments for {name}: expected a JSON object"
    errors = sorted(_validators[name].iter_errors(arguments),
                    key=lambda e: (list(map(str, e.absolute_path)), e.message))
    if errors:
        detail = "; ".join(f"{_where(e)}: {_short(e.message)}" for e in errors[:5])
        return f"[Tool Error] invalid arguments for {name}: {detail}"
    try:
        return tool.handler(ctx, arguments)
    except ToolError as exc:
        return f"[Tool Error] {exc}"
    except RtcError as exc:  # a service's refusal (not found, limits): the model may adapt
        return f"[Tool Error] {exc.message}"
