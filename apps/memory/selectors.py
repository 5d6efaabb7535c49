"""Reads of memory: ranked search, the pinned set, pages for the API, the export.

Ranking (``user_memory_search``): a memory's score is the number of distinct query words it
contains (``search.matches``) times its importance weight (critical 1.5, high 1.3, medium 1.0,
low 0.7); ties go to the most recently changed, then the highest id. Every function filters by
the caller's user id first; ids of other users' rows are never read.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q

from apps.sessions.models import Session
from rtcagent.errors import InvalidRequest, NotFound
from rtcagent.rows import Columns, read

from . import search
from .models import IMPORTANCE_RANK, IMPORTANCE_WEIGHT, PINNED_IMPORTANCE, SessionMemory, UserMemory


@dataclass(frozen=True)
class Found:
    memory: UserMemory
    score: float  # matched words x importance weight


def user_memory_search(
    *,
    user_id: int,
    query: str,
    limit: int = 5,
    offset: int = 0,
    category: str | None = None,
    importance: str | None = None,
    exclude_importance: Iterable[str] = (),
    session_id: Any = None,
) -> list[Found]:
    """The user's memories matching ``query``, best first (see the module docstring)."""
    hits = search.matches(user_id, search.query_terms(query))
    if not hits:
        return []
    rows = UserMemory.objects.filter(user_id=user_id, pk__in=list(hits))
    if category:
        rows = rows.filter(category=category)
    if importance:
        rows = rows.filter(importance=importance)
    if session_id:
        rows = rows.filter(session_id=session_id)
    excluded = list(exclude_importance)
    if excluded:
        rows = rows.exclude(importance__in=excluded)
    found = [Found(m, round(hits[m.pk] * IMPORTANCE_WEIGHT[m.importance], 6)) for m in rows]
    found.sort(key=lambda f: (-f.score, -f.memory.updated_at.timestamp(), -f.memory.pk))
    return found[offset:offset + limit]


_USER_MEMORY = Columns(UserMemory, "u")  # hand-written reads: before every turn's first request


def user_memories_pinned(user_id: int) -> list[UserMemory]:
    """Critical then high memories, each oldest first: an order that only changes when they do,
    so the prompt block built from it stays byte-identical between calls."""
    rows = _USER_MEMORY.build_all(read(*pinned_statement(user_id)))
    rows.sort(key=lambda m: (-IMPORTANCE_RANK[m.importance], m.created_at, m.pk))
    return rows


def pinned_statement(user_id: int) -> tuple[str, list[Any]]:
    """``user_memories_pinned``'s statement (``rtcagent.rows.together`` reads it with others)."""
    marks = ", ".join(["%s"] * len(PINNED_IMPORTANCE))
    return _USER_MEMORY.statement(f"WHERE u.user_id = %s AND u.importance IN ({marks})",
                                  [user_id, *PINNED_IMPORTANCE])


def session_memories(session_id: uuid.UUID | str) -> list[SessionMemory]:
    """A session's memory entries, oldest first."""
    return list(SessionMemory.objects.filter(session_id=session_id).order_by("id"))


def session_memories_of(*, user_id: int, session_id: uuid.UUID | str) -> list[SessionMemory]:
    """A session's memory entries, for its owner; ``NotFound`` otherwise (or when deleted)."""
    if not Session.objects.filter(pk=session_id, user_id=user_id,
                                  deleted_at__isnull=True).exists():
        raise NotFound("session", session_id)
    return session_memories(session_id)


# --- the API's pages -------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    items: list[UserMemory]
    next_cursor: str


def _encode(data: dict[str, Any]) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str) -> dict[str, Any]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, TypeError, binascii.Error):
        raise InvalidRequest("cursor: not a cursor of this list") from None
    if not isinstance(data, dict):
        raise InvalidRequest("cursor: not a cursor of this list")
    return data


def user_memory_page(
    *,
    user_id: int,
    q: str = "",
    category: str | None = None,
    importance: str | None = None,
    session_id: Any = None,
    cursor: str | None = None,
    limit: int = 50,
) -> Page:
    """A page of the user's memories: with ``q`` ranked as the agent's search (the cursor is a
    position), else the most recently changed first (the cursor names the last row seen, so
    rows added meanwhile shift nothing)."""
    state = _decode(cursor) if cursor else {}
    if q.strip():
        offset = state.get("o", 0) if cursor else 0
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0 or (
            cursor and "o" not in state
        ):
            raise InvalidRequest("cursor: not a cursor of this list")
        found = user_memory_search(user_id=user_id, query=q, limit=limit + 1, offset=offset,
                                   category=category, importance=importance,
                                   session_id=session_id)
        more = len(found) > limit
        return Page([f.memory for f in found[:limit]],
                    _encode({"o": offset + limit}) if more else "")
    rows = UserMemory.objects.filter(user_id=user_id)
    if category:
        rows = rows.filter(category=category)
    if importance:
        rows = rows.filter(importance=importance)
    if session_id:
        rows = rows.filter(session_id=session_id)
    if cursor:
        try:
            at = datetime.fromisoformat(state["u"])
            pk = state["i"]
        except (KeyError, TypeError, ValueError):
            raise InvalidRequest("cursor: not a cursor of this list") from None
        if at.tzinfo is None or not isinstance(pk, int) or isinstance(pk, bool):
            raise InvalidRequest("cursor: not a cursor of this list")
        rows = rows.filter(Q(updated_at__lt=at) | Q(updated_at=at, id__lt=pk))
    page = list(rows.order_by("-updated_at", "-id")[: limit + 1])
    if len(page) <= limit:
        return Page(page, "")
    page = page[:limit]
    last = page[-1]
    return Page(page, _encode({"u": last.updated_at.isoformat(), "i": last.pk}))


def user_memory_export(user_id: int) -> dict[str, Any]:
    """Everything the memory system keeps about the user, as plain JSON-able data."""
    from .serializers import session_memory_to_dict, user_memory_to_dict

    memories = UserMemory.objects.filter(user_id=user_id).order_by("created_at", "id")
    notes = (SessionMemory.objects.filter(user_id=user_id)
             .order_by("session_id", "id"))
    return {
        "version": 1,
        "memories": [user_memory_to_dict(m) for m in memories],
        "session_memories": [
            {**session_memory_to_dict(m), "session_id": str(m.session_id)} for m in notes
        ],
    }
