"""Writes to memory: one function per use case, one transaction, ownership checked.

Guarantees:

* Input is checked before anything is written (``InvalidRequest`` names the field): a category
  and importance of the lists, content neither empty, over its length limit, nor holding NUL.
* **User memory is bounded** (``MEMORY_USER_MAX``, 1,000 per user). Saving one more evicts the
  user's least important memory, the least recently changed first, but only one that is not
  more important than the memory being saved; when every memory is more important, the save is
  refused (``InvalidRequest`` with slug ``memory.full``) and nothing changes. So a ``low`` note
  never pushes out a ``critical`` rule, and the agent is told to delete something instead.
  Saves of one user are serialised on the user's row (``FOR NO KEY UPDATE``), so two saves
  cannot both take the last place.
* **Session memory is bounded** (``MEMORY_SESSION_MAX_ENTRIES`` 20 and ``MEMORY_SESSION_MAX_TOKENS``
  12,000 per session): after an insert the oldest entries are deleted until both hold; one entry
  is cut to ``MEMORY_SESSION_ENTRY_MAX_TOKENS`` on a character boundary. Writers of a session are
  serialised on the session's row.
* A memory that is not the caller's is ``NotFound`` (never "forbidden": that would tell it
  exists).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Case, IntegerField, Value, When

from apps.sessions.models import Session
from rtcagent.errors import InvalidRequest, NotFound

from .limits import memory_setting
from .models import (
    IMPORTANCE_RANK,
    Importance,
    MemorySource,
    SessionCategory,
    SessionMemory,
    UserCategory,
    UserMemory,
)

TRUNCATED = " […]"


@dataclass(frozen=True)
class Saved:
    """A saved user memory and those evicted to make room for it (usually none, or one)."""

    memory: UserMemory
    evicted: tuple[UserMemory, ...] = ()


# --- validation ------------------------------------------------------------------------------


def _choice(value: Any, choices: type, field: str) -> str:
    if not isinstance(value, str) or value not in choices.values:
        allowed = ", ".join(choices.values)
        raise InvalidRequest(f"{field}: must be one of {allowed}", details={"field": field})
    return value


def check_content(value: Any, *, max_chars: int, field: str = "content") -> str:
    """``value`` stripped, or ``InvalidRequest``: not a string, empty, NUL, too long."""
    if not isinstance(value, str):
        raise InvalidRequest(f"{field}: must be a string", details={"field": field})
    text = value.strip()
    if not text:
        raise InvalidRequest(f"{field}: must not be empty", details={"field": field})
    if "\x00" in text:
        raise InvalidRequest(f"{field}: contains a NUL character (U+0000), which cannot be "
                             "stored", details={"field": field})
    if len(text) > max_chars:
        raise InvalidRequest(
            f"{field}: {len(text)} characters, at most {max_chars} are allowed",
            details={"field": field, "max_chars": max_chars},
        )
    return text


def _importance_rank() -> Case:
    return Case(*(When(importance=k, then=Value(v)) for k, v in IMPORTANCE_RANK.items()),
                output_field=IntegerField())


def _lock_user(user_id: int) -> None:
    # Serialises the user's saves (count, then evict, then insert) without blocking the foreign
    # key checks of other writers (messages, turns) on the same row.
    list(get_user_model().objects.select_for_update(no_key=True).filter(pk=user_id)
         .values_list("pk", flat=True))


def _users_session(user_id: int, session_id: Any) -> bool:
    try:
        sid = uuid.UUID(str(session_id))
    except ValueError:
        return False
    return Session.objects.filter(pk=sid, user_id=user_id).exists()


def _owned(user_id: int, memory_id: Any) -> UserMemory:
    if isinstance(memory_id, bool) or not isinstance(memory_id, int):
        raise NotFound("memory", memory_id)
    memory = UserMemory.objects.select_for_update().filter(pk=memory_id, user_id=user_id).first()
    if memory is None:
        raise NotFound("memory", memory_id)
    return memory


# --- user memory -----------------------------------------------------------------------------


def user_memory_save(
    *,
    user_id: int,
    content: Any,
    category: Any,
    importance: Any = Importance.MEDIUM,
    session_id: uuid.UUID | str | None = None,
    source: str = MemorySource.AGENT,
) -> Saved:
    """Save a user memory; see the module docstring for the bound and what gives way."""
    text = check_content(content, max_chars=int(memory_setting("MEMORY_USER_MAX_CHARS")))
    category = _choice(category, UserCategory, "category")
    importance = _choice(importance, Importance, "importance")
    limit = int(memory_setting("MEMORY_USER_MAX"))
    with transaction.atomic():
        _lock_user(user_id)
        if session_id is not None and not _users_session(user_id, session_id):
            session_id = None  # not the user's (or gone): the memory is kept, unlinked
        evicted: tuple[UserMemory, ...] = ()
        mine = UserMemory.objects.filter(user_id=user_id)
        excess = mine.count() - limit + 1
        if excess > 0:
            victims = list(
                mine.annotate(rank=_importance_rank()).order_by("rank", "updated_at", "id")[:excess]
            )
            if any(IMPORTANCE_RANK[v.importance] > IMPORTANCE_RANK[importance] for v in victims):
                raise InvalidRequest(
                    f"memory is full ({limit} memories) and none is less important than this "
                    f"one ({importance}); delete one first",
                    slug="memory.full", details={"limit": limit},
                )
            UserMemory.objects.filter(pk__in=[v.pk for v in victims]).delete()
            evicted = tuple(victims)
        memory = UserMemory.objects.create(
            user_id=user_id, content=text, category=category, importance=importance,
            session_id=session_id, source=source,
        )
    return Saved(memory, evicted)


def user_memory_update(
    *,
    user_id: int,
    memory_id: Any,
    content: Any = None,
    category: Any = None,
    importance: Any = None,
) -> UserMemory:
    """Change a memory of the user's (only the fields given); ``NotFound`` if not theirs."""
    fields: dict[str, str] = {}
    if content is not None:
        fields["content"] = check_content(
            content, max_chars=int(memory_setting("MEMORY_USER_MAX_CHARS")))
    if category is not None:
        fields["category"] = _choice(category, UserCategory, "category")
    if importance is not None:
        fields["importance"] = _choice(importance, Importance, "importance")
    with transaction.atomic():
        memory = _owned(user_id, memory_id)
        if not fields:
            return memory
        for name, value in fields.items():
            setattr(memory, name, value)
        memory.save(update_fields=[*fields, "updated_at"])
    return memory


def user_memory_delete(*, user_id: int, memory_id: Any) -> UserMemory:
    """Delete a memory of the user's; returns it (unsaved); ``NotFound`` if not theirs."""
    with transaction.atomic():
        memory = _owned(user_id, memory_id)
        pk = memory.pk
        memory.delete()
        memory.pk = pk
    return memory


# --- session memory --------------------------------------------------------------------------


def cut_to_tokens(text: str, max_tokens: int) -> tuple[str, int]:
    """``text`` cut on a character boundary to at most ``max_tokens`` (marked when cut), and its
    token count."""
    from apps.turns.tokens import count_text

    tokens = count_text(text)
    if tokens <= max_tokens:
        return text, tokens
    marker = count_text(TRUNCATED)
    keep = len(text)
    while keep > 0 and tokens > max_tokens:
        # Shrink by the overshoot's share of the characters (at least one): a few rounds at most.
        keep = max(0, min(keep - 1, int(keep * (max_tokens - marker) / tokens)))
        tokens = count_text(text[:keep]) + marker
    cut = text[:keep].rstrip() + TRUNCATED
    return cut, count_text(cut)


def session_memory_add(
    *,
    user_id: int,
    session_id: uuid.UUID | str,
    entries: list[tuple[str, str]],
    source: str = MemorySource.AGENT,
) -> tuple[list[SessionMemory], int]:
    """Add ``(category, content)`` entries to a session of the user's, then evict the oldest
    beyond the bounds. Returns the entries kept of those added and how many were evicted.

    ``NotFound`` when the session is not the user's (or deleted); entries are all checked
    before anything is written."""
    max_chars = int(memory_setting("MEMORY_SESSION_MAX_CHARS"))
    entry_tokens = int(memory_setting("MEMORY_SESSION_ENTRY_MAX_TOKENS"))
    checked: list[tuple[str, str, int]] = []
    for category, content in entries:
        category = _choice(category, SessionCategory, "category")
        text, tokens = cut_to_tokens(check_content(content, max_chars=max_chars), entry_tokens)
        checked.append((category, text, tokens))
    try:
        sid = uuid.UUID(str(session_id))
    except ValueError:
        raise NotFound("session", session_id) from None
    with transaction.atomic():
        session = (
            Session.objects.select_for_update()
            .filter(pk=sid, user_id=user_id, deleted_at__isnull=True).first()
        )
        if session is None:
            raise NotFound("session", session_id)
        added = [
            SessionMemory.objects.create(session_id=session.id, user_id=user_id,
                                         category=category, content=text, tokens=tokens,
                                         source=source)
            for category, text, tokens in checked
        ]
        evicted = _evict_session(session.id)
    kept = [m for m in added if m.pk not in evicted]
    return kept, len(evicted)


def _evict_session(session_id: uuid.UUID) -> set[int]:
    """Delete the session's oldest entries until the count and token bounds hold."""
    max_entries = int(memory_setting("MEMORY_SESSION_MAX_ENTRIES"))
    max_tokens = int(memory_setting("MEMORY_SESSION_MAX_TOKENS"))
    rows = list(SessionMemory.objects.filter(session_id=session_id).order_by("-id")
                .values_list("id", "tokens"))
    keep_tokens, evicted = 0, set()
    for index, (pk, tokens) in enumerate(rows):  # newest first: the newest always stays
        if evicted or (index and (index >= max_entries or keep_tokens + tokens > max_tokens)):
            evicted.add(pk)  # from the first that does not fit, everything older goes
        else:
            keep_tokens += tokens
    if evicted:
        SessionMemory.objects.filter(pk__in=evicted).delete()
    return evicted
