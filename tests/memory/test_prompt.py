"""Memory as prompt text: the pinned block (stable), the recalled block (each turn), the
session-memory summary (for a compact without an LLM call)."""

from __future__ import annotations

import pytest

from apps.memory.prompt import (
    pinned_memory_text,
    recalled_memory_text,
    session_memory_summary,
)
from apps.memory.services import user_memory_save, user_memory_update

pytestmark = pytest.mark.django_db


def test_pinned_memory_is_critical_then_high_oldest_first(make_user, remember) -> None:
    user = make_user()
    high = remember(user, "Prefers pytest", category="feedback", importance="high", age=300)
    crit = remember(user, "Never deploy on Fridays\nWhy: on-call is thin", category="feedback",
                    importance="critical", age=100)
    remember(user, "Likes tea", category="user", importance="medium")
    remember(user, "Has a cat", category="user", importance="low")
    assert pinned_memory_text(user.id) == (
        "<user_memory>\n"
        "What you know about this user from earlier sessions. Follow it unless the user says "
        "otherwise; the ids are for updateMemory and deleteMemory.\n"
        f"- [id {crit.pk}] (critical, feedback) Never deploy on Fridays\n"
        "  Why: on-call is thin\n"
        f"- [id {high.pk}] (high, feedback) Prefers pytest\n"
        "</user_memory>"
    )


def test_pinned_memory_changes_only_when_a_pinned_memory_does(make_user, remember) -> None:
    user = make_user()
    pinned = remember(user, "Uses uv", importance="high")
    before = pinned_memory_text(user.id)
    user_memory_save(user_id=user.id, content="Drinks coffee", category="user")  # medium
    remember(user, "Old note", importance="low")
    assert pinned_memory_text(user.id) == before
    user_memory_update(user_id=user.id, memory_id=pinned.pk, content="Uses uv and ruff")
    assert pinned_memory_text(user.id) != before
    assert pinned_memory_text(make_user().id) == ""


def test_pinned_memory_stays_within_its_token_budget(make_user, remember, settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "MEMORY_PINNED_MAX_TOKENS": 30}
    user = make_user()
    first = remember(user, "Rule one is short", importance="critical", age=30)
    remember(user, "Rule two " + "is long " * 20, importance="critical", age=20)
    remember(user, "Rule three", importance="high", age=10)
    text = pinned_memory_text(user.id)
    assert f"[id {first.pk}]" in text and "Rule two" not in text and "Rule three" not in text
    assert "(2 more left out for length: find them with searchMemory)" in text


def test_recalled_memory_is_found_user_memory_and_the_latest_session_notes(
    make_user, make_session, remember, note
) -> None:
    user = make_user()
    session = make_session(user)
    found = remember(user, "The staging database is Postgres 16", age=60)
    remember(user, "Staging deploys need approval", importance="critical")  # pinned already
    remember(user, "Unrelated note about lunch")
    for i in range(7):
        note(session, f"note {i}", category="progress" if i % 2 else "decision")
    note(make_session(user), "another session's note")
    day = found.updated_at.date().isoformat()
    assert recalled_memory_text(user_id=user.id, session_id=str(session.id),
                                query="Is staging on postgres?") == (
        "<memory>\n"
        "Memories about the user that match the latest message:\n"
        f"- [id {found.pk}] (medium, project) The staging database is Postgres 16 "
        f"(updated {day})\n"
        "\n"
        "Notes saved earlier in this session (oldest first):\n"
        "- [decision] note 2\n- [progress] note 3\n- [decision] note 4\n"
        "- [progress] note 5\n- [decision] note 6\n"
        "</memory>"
    )


def test_recalled_session_notes_stay_within_5k_tokens(make_user, make_session, note) -> None:
    user = make_user()
    session = make_session(user)
    note(session, "old small", tokens=10)
    note(session, "big one", tokens=2000)
    note(session, "bigger one", tokens=2000)
    note(session, "newest", tokens=1500)
    text = recalled_memory_text(user_id=user.id, session_id=str(session.id), query="")
    assert "newest" in text and "bigger one" in text
    assert "big one\n" not in text and "old small" not in text  # 3,500 + 2,000 > 5,000


def test_nothing_to_recall_is_an_empty_string(make_user, make_session, remember) -> None:
    user = make_user()
    remember(user, "Pinned rule about staging", importance="high")
    session = make_session(user)
    assert recalled_memory_text(user_id=user.id, session_id=str(session.id),
                                query="staging") == ""


def test_session_memory_summary_groups_every_note_by_category(make_user, make_session,
                                                              note) -> None:
    user = make_user()
    session = make_session(user)
    assert session_memory_summary(str(session.id)) is None
    note(session, "Fixing the login form", category="context")
    note(session, "Chose JWT\nbecause the API is stateless", category="decision")
    note(session, "CORS error: fixed by allowing the origin", category="issue")
    note(session, "Form renders", category="progress")
    note(session, "Chose bcrypt", category="decision")
    assert session_memory_summary(str(session.id)) == (
        "# Session memory\n\n"
        "Notes kept during this session (decisions, context, progress, issues, learnings). "
        "They stand for the conversation before this point.\n\n"
        "## Decisions\n- Chose JWT\n  because the API is stateless\n- Chose bcrypt\n\n"
        "## Current context\n- Fixing the login form\n\n"
        "## Progress\n- Form renders\n\n"
        "## Issues and fixes\n- CORS error: fixed by allowing the origin"
    )
