"""Memory as prompt text: the pinned block, the recalled block, the session-memory summary.

* ``pinned_memory_text``: the user's critical and high memories, for the prompt's stable prefix.
  Its bytes change only when one of those memories does (fixed order, no dates, no counts), so
  consecutive calls keep sharing the prefix the provider caches. Bounded by
  ``MEMORY_PINNED_MAX_TOKENS`` (in that order: what does not fit is left out, and said so).
* ``recalled_memory_text``: for the prompt's volatile tail, each turn: the top user memories
  found for ``query`` (ranked as ``selectors.user_memory_search``; pinned ones are left out,
  they are already in the prefix) and the session's latest memory entries within a token budget.
* ``session_memory_summary``: every entry of the session's memory, by category, as the summary
  of a session-memory compact (no LLM call).

Every function answers ``""`` (or ``None`` for the summary) when there is nothing to say, so the
caller adds nothing to the prompt.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import connection

from rtcagent.rows import Columns, read

from .limits import memory_setting
from .models import PINNED_IMPORTANCE, SessionCategory, SessionMemory, UserMemory
from .selectors import session_memories, user_memories_pinned, user_memory_search

PINNED_INTRO = (
    "What you know about this user from earlier sessions. Follow it unless the user says "
    "otherwise; the ids are for updateMemory and deleteMemory."
)
RECALLED_INTRO = "Memories about the user that match the latest message:"
SESSION_INTRO = "Notes saved earlier in this session (oldest first):"
SUMMARY_INTRO = (
    "Notes kept during this session (decisions, context, progress, issues, learnings). They "
    "stand for the conversation before this point."
)
CATEGORY_TITLES: dict[str, str] = {
    SessionCategory.DECISION: "Decisions",
    SessionCategory.CONTEXT: "Current context",
    SessionCategory.PROGRESS: "Progress",
    SessionCategory.ISSUE: "Issues and fixes",
    SessionCategory.LEARNINGS: "Learnings",
}


def _indent(text: str) -> str:
    """Continuation lines of an item, indented under its bullet."""
    return "\n  ".join(line.rstrip() for line in text.strip().splitlines())


def memory_line(m: UserMemory, *, dated: bool = False) -> str:
    """One user memory as a bullet: ``- [id 12] (high, feedback) text``."""
    when = f" (updated {m.updated_at.date().isoformat()})" if dated else ""
    return f"- [id {m.pk}] ({m.importance}, {m.category}) {_indent(m.content)}{when}"


def session_line(m: SessionMemory) -> str:
    return f"- [{m.category}] {_indent(m.content)}"


def pinned_memory_text(user_id: int) -> str:
    """The user's critical and high memories as a block for the stable prefix ("" if none)."""
    from apps.turns.tokens import count_text

    rows = user_memories_pinned(user_id)
    if not rows:
        return ""
    budget = int(memory_setting("MEMORY_PINNED_MAX_TOKENS"))
    lines: list[str] = []
    used = 0
    for m in rows:
        line = memory_line(m)
        cost = count_text(line) + 1
        if used + cost > budget:
            left = len(rows) - len(lines)
            lines.append(f"({left} more left out for length: find them with searchMemory)")
            break
        lines.append(line)
        used += cost
    body = "\n".join(lines)
    return f"<user_memory>\n{PINNED_INTRO}\n{body}\n</user_memory>"


_SESSION_MEMORY = Columns(SessionMemory, "e")  # hand-written: before every turn's first request


def _latest_session_entries(session_id: uuid.UUID | str) -> list[SessionMemory]:
    budget = int(memory_setting("MEMORY_SESSION_INJECT_TOKENS"))
    picked: list[SessionMemory] = []
    used = 0
    for m in _SESSION_MEMORY.build_all(read(*session_entries_statement(session_id))):
        if used + m.tokens > budget:
            break
        picked.append(m)
        used += m.tokens
    return picked[::-1]


def session_entries_statement(session_id: uuid.UUID | str) -> tuple[str, list[Any]]:
    """The statement of the session's latest entries (``rtcagent.rows.together`` reads it with
    others)."""
    return _SESSION_MEMORY.statement(
        "WHERE e.session_id = %s ORDER BY e.id DESC LIMIT %s",
        [SessionMemory._meta.get_field("session").get_db_prep_value(session_id, connection),
         int(memory_setting("MEMORY_SESSION_INJECT"))])


def recalled_memory_text(*, user_id: int, session_id: str, query: str) -> str:
    """Memories for this turn: user memories found for ``query`` and the session's latest
    entries, as one block for the volatile tail ("" if there are none)."""
    found = user_memory_search(
        user_id=user_id, query=query, limit=int(memory_setting("MEMORY_RECALL_LIMIT")),
        exclude_importance=PINNED_IMPORTANCE,
    )
    entries = _latest_session_entries(session_id)
    parts: list[str] = []
    if found:
        lines = "\n".join(memory_line(f.memory, dated=True) for f in found)
        parts.append(f"{RECALLED_INTRO}\n{lines}")
    if entries:
        lines = "\n".join(session_line(m) for m in entries)
        parts.append(f"{SESSION_INTRO}\n{lines}")
    if not parts:
        return ""
    return "<memory>\n" + "\n\n".join(parts) + "\n</memory>"


def session_memory_summary(session_id: str) -> str | None:
    """The whole session memory as a compaction summary; None when the session has none."""
    rows = session_memories(session_id)
    if not rows:
        return None
    sections: list[str] = []
    for category, title in CATEGORY_TITLES.items():
        items = [f"- {_indent(m.content)}" for m in rows if m.category == category]
        if items:
            sections.append(f"## {title}\n" + "\n".join(items))
    return "# Session memory\n\n" + SUMMARY_INTRO + "\n\n" + "\n\n".join(sections)
