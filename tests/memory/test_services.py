"""Writes to memory: validation, the per-user bound (what gives way, what is refused), the
per-session bounds (entries and tokens, oldest first), ownership."""

from __future__ import annotations

import uuid

import pytest

from apps.memory.models import SessionMemory, UserMemory
from apps.memory.services import (
    TRUNCATED,
    session_memory_add,
    user_memory_delete,
    user_memory_save,
    user_memory_update,
)
from apps.turns.tokens import count_text
from rtcagent.errors import InvalidRequest, NotFound

pytestmark = pytest.mark.django_db


@pytest.fixture
def knobs(settings):
    def set_(**values) -> None:
        settings.RTCAGENT = {**settings.RTCAGENT, **values}

    return set_


def _rows(user) -> list[tuple[str, str]]:
    return list(UserMemory.objects.filter(user=user).order_by("id")
                .values_list("content", "importance"))


@pytest.mark.parametrize(("fields", "message"), [
    ({"content": "   "}, "content: must not be empty"),
    ({"content": "a\x00b"}, "content: contains a NUL character"),
    ({"content": "x" * 4001}, "content: 4001 characters, at most 4000 are allowed"),
    ({"content": 42}, "content: must be a string"),
    ({"category": "hobby"}, "category: must be one of user, feedback, project, reference"),
    ({"importance": "urgent"}, "importance: must be one of low, medium, high, critical"),
])
def test_bad_input_is_refused_and_nothing_is_written(make_user, fields, message) -> None:
    user = make_user()
    args = {"content": "Fine", "category": "user", "importance": "low", **fields}
    with pytest.raises(InvalidRequest) as err:
        user_memory_save(user_id=user.id, **args)
    assert err.value.message.startswith(message)
    assert not UserMemory.objects.exists()


def test_content_is_stored_trimmed_and_linked_to_the_users_session(make_user,
                                                                   make_session) -> None:
    user, other = make_user(), make_user()
    mine, theirs = make_session(user), make_session(other)
    saved = user_memory_save(user_id=user.id, content="  Likes tea \n", category="user",
                             session_id=mine.id)
    assert (saved.memory.content, saved.memory.session_id, saved.evicted) == (
        "Likes tea", mine.id, ())
    unlinked = user_memory_save(user_id=user.id, content="x", category="user",
                                session_id=theirs.id)
    assert unlinked.memory.session_id is None  # never linked to another user's session


def test_a_full_memory_evicts_the_least_important_least_recently_changed(make_user, remember,
                                                                         knobs) -> None:
    knobs(MEMORY_USER_MAX=3)
    user = make_user()
    remember(user, "old medium", age=300)
    remember(user, "old low", importance="low", age=200)
    remember(user, "new low", importance="low", age=100)
    saved = user_memory_save(user_id=user.id, content="fresh", category="user",
                             importance="medium")
    assert [m.content for m in saved.evicted] == ["old low"]
    assert _rows(user) == [("old medium", "medium"), ("new low", "low"), ("fresh", "medium")]


def test_a_full_memory_refuses_what_would_push_out_something_more_important(
    make_user, remember, knobs
) -> None:
    knobs(MEMORY_USER_MAX=2)
    user = make_user()
    remember(user, "rule one", importance="critical")
    remember(user, "rule two", importance="high")
    before = _rows(user)
    with pytest.raises(InvalidRequest) as err:
        user_memory_save(user_id=user.id, content="trivia", category="user", importance="low")
    assert err.value.slug == "memory.full"
    assert err.value.message == ("memory is full (2 memories) and none is less important than "
                                 "this one (low); delete one first")
    assert _rows(user) == before
    saved = user_memory_save(user_id=user.id, content="rule three", category="user",
                             importance="high")  # as important as the least: it gives way
    assert [m.content for m in saved.evicted] == ["rule two"]


def test_bounds_are_per_user(make_user, remember, knobs) -> None:
    knobs(MEMORY_USER_MAX=1)
    user, other = make_user(), make_user()
    remember(other, "theirs", importance="critical")
    assert user_memory_save(user_id=user.id, content="mine", category="user").evicted == ()
    assert _rows(other) == [("theirs", "critical")]


def test_update_and_delete_act_on_the_callers_memories_only(make_user, remember) -> None:
    user, other = make_user(), make_user()
    theirs = remember(other, "their secret")
    for call in (lambda: user_memory_update(user_id=user.id, memory_id=theirs.pk, content="x"),
                 lambda: user_memory_delete(user_id=user.id, memory_id=theirs.pk),
                 lambda: user_memory_delete(user_id=user.id, memory_id=10**12),
                 lambda: user_memory_delete(user_id=user.id, memory_id="1")):
        with pytest.raises(NotFound):
            call()
    assert UserMemory.objects.get(pk=theirs.pk).content == "their secret"
    mine = remember(user, "draft")
    with pytest.raises(InvalidRequest):
        user_memory_update(user_id=user.id, memory_id=mine.pk, content="ok", importance="huge")
    assert UserMemory.objects.get(pk=mine.pk).content == "draft"  # all or nothing
    updated = user_memory_update(user_id=user.id, memory_id=mine.pk, importance="high")
    assert (updated.content, updated.importance) == ("draft", "high")


def test_session_memory_keeps_the_latest_20_entries(make_user, make_session) -> None:
    user = make_user()
    session = make_session(user)
    for i in range(18):
        session_memory_add(user_id=user.id, session_id=session.id,
                           entries=[("progress", f"step {i}")])
    kept, evicted = session_memory_add(
        user_id=user.id, session_id=session.id,
        entries=[("decision", "step 18"), ("issue", "step 19"), ("learnings", "step 20")])
    assert (len(kept), evicted) == (3, 1)
    contents = list(SessionMemory.objects.filter(session=session).order_by("id")
                    .values_list("content", flat=True))
    assert contents == [f"step {i}" for i in range(1, 21)]


def test_session_memory_keeps_within_its_token_budget_oldest_out_first(make_user, make_session,
                                                                       knobs) -> None:
    small = "word " * 5
    big = "many words here " * 5
    budget = count_text(small.strip()) + count_text(big.strip()) - 1
    knobs(MEMORY_SESSION_MAX_TOKENS=budget)
    user = make_user()
    session = make_session(user)
    session_memory_add(user_id=user.id, session_id=session.id,
                       entries=[("context", small), ("context", big), ("context", small)])
    rows = list(SessionMemory.objects.filter(session=session).order_by("id")
                .values_list("content", "tokens"))
    assert sum(t for _, t in rows) <= budget
    # Everything older than the first entry that does not fit goes, even a small one.
    assert [c for c, _ in rows] == [small.strip()]
    assert rows[0][1] == count_text(small.strip())


def test_a_session_memory_entry_is_cut_to_its_token_limit(make_user, make_session,
                                                          knobs) -> None:
    knobs(MEMORY_SESSION_ENTRY_MAX_TOKENS=20)
    user = make_user()
    session = make_session(user)
    text = "Ünïcödé words and more words " * 20
    (entry,), _ = session_memory_add(user_id=user.id, session_id=session.id,
                                     entries=[("issue", text)])
    assert entry.content.endswith(TRUNCATED) and entry.tokens <= 20
    assert text.startswith(entry.content[: -len(TRUNCATED)].rstrip())
    assert entry.tokens == count_text(entry.content)


def test_session_memory_needs_the_users_own_live_session(make_user, make_session) -> None:
    user, other = make_user(), make_user()
    theirs = make_session(other)
    for sid in (theirs.id, uuid.uuid4(), "not-a-uuid"):
        with pytest.raises(NotFound):
            session_memory_add(user_id=user.id, session_id=sid, entries=[("issue", "x")])
    mine = make_session(user)
    with pytest.raises(InvalidRequest):  # checked before anything is written
        session_memory_add(user_id=user.id, session_id=mine.id,
                           entries=[("issue", "fine"), ("mood", "bad category")])
    assert not SessionMemory.objects.exists()
