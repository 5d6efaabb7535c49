"""The agent's memory tools, called through the server-tool registry as the engine calls them."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from apps.memory.models import SessionMemory, UserMemory
from apps.turns.server_tools import ToolContext, run

pytestmark = pytest.mark.django_db


def _user(ctx: ToolContext):
    return get_user_model().objects.get(pk=ctx.user_id)


@pytest.fixture
def ctx(make_user, make_session) -> ToolContext:
    user = make_user()
    session = make_session(user)
    return ToolContext(user_id=user.id, session_id=str(session.id), turn_id="t-1",
                       message_id="m-1")


def test_save_search_update_and_delete_a_memory(ctx) -> None:
    out = run("saveMemory", ctx, {"content": "Never push to main.\nWhy: CI deploys it.",
                                  "category": "feedback", "importance": "critical"})
    m = UserMemory.objects.get()
    assert out == f"Saved memory {m.pk} (critical, feedback)."
    assert (m.user_id, str(m.session_id), m.source) == (ctx.user_id, ctx.session_id, "agent")
    day = m.updated_at.date().isoformat()
    assert run("searchMemory", ctx, {"query": "push main"}) == (
        "1 memories, best match first:\n"
        f"- [id {m.pk}] (critical, feedback) Never push to main.\n  Why: CI deploys it. "
        f"(updated {day})")
    assert run("updateMemory", ctx, {"id": m.pk, "importance": "high"}) == (
        f"Updated memory {m.pk} (high, feedback).")
    assert run("updateMemory", ctx, {"id": m.pk}) == (
        "[Tool Error] give at least one of content, category, importance to change")
    assert run("deleteMemory", ctx, {"id": m.pk}) == f"Deleted memory {m.pk}."
    assert run("deleteMemory", ctx, {"id": m.pk}) == f"[Tool Error] memory {m.pk} not found"
    assert run("searchMemory", ctx, {"query": "push"}) == "No memory matches."


def test_save_defaults_to_medium_importance(ctx) -> None:
    run("saveMemory", ctx, {"content": "Works in Berlin", "category": "user"})
    assert UserMemory.objects.get().importance == "medium"


def test_another_users_memory_is_out_of_reach(ctx, make_user, remember) -> None:
    other = remember(make_user(), "Their plan", importance="critical")
    assert run("deleteMemory", ctx, {"id": other.pk}) == (
        f"[Tool Error] memory {other.pk} not found")
    assert run("updateMemory", ctx, {"id": other.pk, "content": "mine now"}) == (
        f"[Tool Error] memory {other.pk} not found")
    assert run("searchMemory", ctx, {"query": "plan"}) == "No memory matches."
    assert UserMemory.objects.get(pk=other.pk).content == "Their plan"


def test_search_filters_and_limits(ctx, remember) -> None:
    user = _user(ctx)
    for i in range(4):
        remember(user, f"Release note {i}", category="project", age=100 - i)
    remember(user, "Release manager is Ana", category="user")
    out = run("searchMemory", ctx, {"query": "release", "category": "project", "limit": 2})
    assert out.splitlines()[0] == "2 memories, best match first:"
    assert "Release note 3" in out and "Release note 2" in out and "Ana" not in out
    assert run("searchMemory", ctx, {"query": "release", "limit": 0}).startswith(
        "[Tool Error] invalid arguments for searchMemory: limit: 0 is less than the minimum")


def test_a_full_memory_tells_the_agent_what_gave_way(ctx, remember, settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "MEMORY_USER_MAX": 1}
    old = remember(_user(ctx), "Old low note", importance="low")
    out = run("saveMemory", ctx, {"content": "New rule", "category": "feedback",
                                  "importance": "high"})
    new = UserMemory.objects.get()
    assert out == (f"Saved memory {new.pk} (high, feedback). Memory is full: memory {old.pk} "
                   "(low, project) was deleted to make room: Old low note")
    out = run("saveMemory", ctx, {"content": "Trivia", "category": "user", "importance": "low"})
    assert out == ("[Tool Error] memory is full (1 memories) and none is less important than "
                   "this one (low); delete one first")


def test_save_session_memory(ctx, settings) -> None:
    assert run("saveSessionMemory", ctx, {"category": "decision",
                                          "content": "Chose SQLite for the demo"}) == (
        "Saved to session memory (decision).")
    note = SessionMemory.objects.get()
    assert (note.category, note.content, str(note.session_id), note.source) == (
        "decision", "Chose SQLite for the demo", ctx.session_id, "agent")
    settings.RTCAGENT = {**settings.RTCAGENT, "MEMORY_SESSION_ENTRY_MAX_TOKENS": 5,
                         "MEMORY_SESSION_MAX_ENTRIES": 1}
    assert run("saveSessionMemory", ctx, {"category": "issue",
                                          "content": "word " * 50}) == (
        "Saved to session memory (issue). It was cut to fit the size limit of one entry. "
        "The 1 oldest entries were dropped to stay within the limits.")
    assert run("saveSessionMemory", ctx, {"category": "mood", "content": "x"}).startswith(
        "[Tool Error] invalid arguments for saveSessionMemory: category: 'mood' is not one of")
    assert SessionMemory.objects.count() == 1
