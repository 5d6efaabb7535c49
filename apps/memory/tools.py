"""The agent's memory tools (server tools: they run in the worker, see
``apps.turns.server_tools``).

User memory (across sessions): ``saveMemory``, ``updateMemory``, ``deleteMemory``,
``searchMemory``. Session memory: ``saveSessionMemory``. Names and texts follow the original's
(``docs/memory.md``). Each handler is one service or selector call; its refusals (a memory not
the user's, memory full, a too long text) come back to the model as ``[Tool Error] ...``.
"""

from __future__ import annotations

from typing import Any

from apps.turns.server_tools import ServerTool, ToolContext, ToolError, register

from . import selectors, services
from .limits import DEFAULTS
from .models import Importance, MemorySource, SessionCategory, UserCategory
from .prompt import memory_line

_CONTENT = {"type": "string", "minLength": 1,
            "maxLength": DEFAULTS["MEMORY_USER_MAX_CHARS"]}
_ID = {"type": "integer", "minimum": 1, "description": "The memory's id, as shown [id N]."}
_CATEGORY = {
    "type": "string", "enum": list(UserCategory.values),
    "description": "user: who the user is (role, expertise, preferences); feedback: how the "
                   "user wants you to work; project: ongoing work, goals, constraints, dates; "
                   "reference: where to find things (URLs, documents, tickets).",
}
_IMPORTANCE = {
    "type": "string", "enum": list(Importance.values),
    "description": "critical and high: shown to you in every conversation; medium and low: "
                   "shown when they match what the user asks.",
}


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required,
            "additionalProperties": False}


def save_memory(ctx: ToolContext, args: dict[str, Any]) -> str:
    saved = services.user_memory_save(
        user_id=ctx.user_id, content=args["content"], category=args["category"],
        importance=args.get("importance", Importance.MEDIUM), session_id=ctx.session_id,
        source=MemorySource.AGENT,
    )
    m = saved.memory
    text = f"Saved memory {m.pk} ({m.importance}, {m.category})."
    for old in saved.evicted:
        text += (f" Memory is full: memory {old.pk} ({old.importance}, {old.category}) was "
                 f"deleted to make room: {old.content[:200]}")
    return text


def update_memory(ctx: ToolContext, args: dict[str, Any]) -> str:
    fields = {k: args[k] for k in ("content", "category", "importance") if k in args}
    if not fields:
        raise ToolError("give at least one of content, category, importance to change")
    m = services.user_memory_update(user_id=ctx.user_id, memory_id=args["id"], **fields)
    return f"Updated memory {m.pk} ({m.importance}, {m.category})."


def delete_memory(ctx: ToolContext, args: dict[str, Any]) -> str:
    m = services.user_memory_delete(user_id=ctx.user_id, memory_id=args["id"])
    return f"Deleted memory {m.pk}."


def search_memory(ctx: ToolContext, args: dict[str, Any]) -> str:
    found = selectors.user_memory_search(
        user_id=ctx.user_id, query=args["query"], limit=args.get("limit", 5),
        category=args.get("category"),
    )
    if not found:
        return "No memory matches."
    lines = "\n".join(memory_line(f.memory, dated=True) for f in found)
    return f"{len(found)} memories, best match first:\n{lines}"


def save_session_memory(ctx: ToolContext, args: dict[str, Any]) -> str:
    kept, evicted = services.session_memory_add(
        user_id=ctx.user_id, session_id=ctx.session_id,
        entries=[(args["category"], args["content"])], source=MemorySource.AGENT,
    )
    text = f"Saved to session memory ({args['category']})."
    if kept and kept[0].content != args["content"].strip():
        text += " It was cut to fit the size limit of one entry."
    if evicted:
        text += f" The {evicted} oldest entries were dropped to stay within the limits."
    return text


SAVE_MEMORY = register(ServerTool(
    name="saveMemory",
    description=(
        "Save a long-term memory about the user; it persists across sessions. Use it for what "
        "will matter in later conversations: who the user is (user), how they want you to "
        "work (feedback), ongoing work, goals and constraints (project), and where to find "
        "things (reference). One self-contained fact per memory, in the third person (\"The "
        "user prefers ...\"), with absolute dates. For feedback and project, add a line "
        "'Why: ...' (the reason the user gave) and a line 'How to apply: ...' (when it "
        "applies). Do not save what only matters for the current task (use saveSessionMemory), "
        "nor secrets. Check the memories you were shown first: update one rather than saving "
        "a duplicate."
    ),
    parameters=_obj({"content": _CONTENT, "category": _CATEGORY,
                     "importance": {**_IMPORTANCE, "default": "medium"}},
                    ["content", "category"]),
    approval="auto",
    handler=save_memory,
))

UPDATE_MEMORY = register(ServerTool(
    name="updateMemory",
    description=(
        "Change a long-term memory: its content, category or importance (give only what "
        "changes). Use it when a memory is partly outdated or its importance was misjudged."
    ),
    parameters=_obj({"id": _ID, "content": _CONTENT, "category": _CATEGORY,
                     "importance": _IMPORTANCE}, ["id"]),
    approval="auto",
    handler=update_memory,
))

DELETE_MEMORY = register(ServerTool(
    name="deleteMemory",
    description=(
        "Delete a long-term memory by its id. Use it when a memory is wrong or no longer true, "
        "or when the user asks you to forget something."
    ),
    parameters=_obj({"id": _ID}, ["id"]),
    approval="auto",
    handler=delete_memory,
))

SEARCH_MEMORY = register(ServerTool(
    name="searchMemory",
    description=(
        "Search your long-term memories about the user (categories user, feedback, project, "
        "reference). Keyword search: a memory matches when it contains any of the words; more "
        "matching words and higher importance rank first, then the most recent."
    ),
    parameters=_obj({
        "query": {"type": "string", "minLength": 1, "maxLength": 500,
                  "description": "Keywords, separated by spaces."},
        "category": {"type": "string", "enum": list(UserCategory.values)},
        "limit": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
    }, ["query"]),
    approval="auto",
    handler=search_memory,
))

SAVE_SESSION_MEMORY = register(ServerTool(
    name="saveSessionMemory",
    description=(
        "Save a note about the current session to session memory: a decision and why "
        "(decision), what is being worked on (context), what is done (progress), a problem and "
        "its fix (issue), or a lesson (learnings). The latest notes are shown to you every "
        "turn and become the summary when the conversation is compacted; the session keeps "
        "its 20 latest. Be specific: file paths, names, exact values."
    ),
    parameters=_obj({
        "category": {"type": "string", "enum": list(SessionCategory.values)},
        "content": {"type": "string", "minLength": 1,
                    "maxLength": DEFAULTS["MEMORY_SESSION_MAX_CHARS"]},
    }, ["category", "content"]),
    approval="auto",
    handler=save_session_memory,
))
