"""The background extraction pass: its trigger, its job queue, and its own LLM call (the exact
request it sends to the scripted model, and what it stores)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.memory import extraction, jobs
from apps.memory.extraction import SYSTEM_PROMPT, TOOL_SCHEMA, extract, maybe_extract, run_next
from apps.memory.models import ExtractionState, SessionMemory
from apps.sessions.models import Session
from apps.turns.llm import OpenAIChat
from apps.turns.models import LLMCall

pytestmark = pytest.mark.django_db

LONG = "The quick brown fox jumps over the lazy dog. " * 20  # about 200 tokens


@pytest.fixture
def knobs(settings):
    settings.RTCAGENT = {**settings.RTCAGENT, "MEMORY_EXTRACT_INIT_TOKENS": 300,
                         "MEMORY_EXTRACT_GROWTH_TOKENS": 150, "MEMORY_EXTRACT_MIN_TOOL_CALLS": 3}


@pytest.fixture
def chat(model) -> OpenAIChat:
    return OpenAIChat(api_key="sk-test-key", base_url=model.base_url, model="scripted-model",
                      max_attempts=1)


def _turn(say, session, question: str, answer: str, calls: int = 0) -> None:
    say(session, "user", "user_message", {"text": question})
    for i in range(calls):
        say(session, "assistant", "toolcall_input",
            {"id": f"call_{i}", "tool_name": "read", "input": f'{{"path": "/f{i}"}}'})
        say(session, "tool", "toolcall_output",
            {"id": f"call_{i}", "tool_name": "read", "input": f'{{"path": "/f{i}"}}',
             "output": f"contents {i}", "status": "completed"})
    if answer:
        say(session, "assistant", "markdown", answer)


# --- the trigger -----------------------------------------------------------------------------


@pytest.mark.usefixtures("knobs")
def test_a_short_conversation_queues_nothing(make_user, make_session, say) -> None:
    session = make_session(make_user())
    _turn(say, session, "hi", "hello")
    maybe_extract(str(session.id))
    assert jobs.pending() == []


@pytest.mark.usefixtures("knobs")
def test_growth_at_a_breakpoint_queues_one_job(make_user, make_session, say) -> None:
    session = make_session(make_user())
    _turn(say, session, LONG, LONG)
    maybe_extract(str(session.id))
    maybe_extract(str(session.id))  # at most one pending job per session
    assert jobs.pending() == [str(session.id)]


@pytest.mark.usefixtures("knobs")
def test_mid_tool_use_it_waits_for_three_tool_calls(make_user, make_session, say) -> None:
    session = make_session(make_user())
    _turn(say, session, LONG + LONG, "", calls=2)  # paused on a tool call: no breakpoint
    maybe_extract(str(session.id))
    assert jobs.pending() == []
    _turn(say, session, "go on", "", calls=1)
    maybe_extract(str(session.id))
    assert jobs.pending() == [str(session.id)]


@pytest.mark.usefixtures("knobs")
def test_the_accountings_context_size_wins_over_the_estimate(make_user, make_session,
                                                             say) -> None:
    session = make_session(make_user())
    _turn(say, session, LONG, LONG)
    Session.objects.filter(pk=session.pk).update(current_context_tokens=299)  # below 300
    maybe_extract(str(session.id))
    assert jobs.pending() == []
    Session.objects.filter(pk=session.pk).update(current_context_tokens=12_000)
    maybe_extract(str(session.id))
    assert jobs.pending() == [str(session.id)]


@pytest.mark.usefixtures("knobs")
def test_a_failed_extraction_delays_the_next_trigger(make_user, make_session, say) -> None:
    session = make_session(make_user())
    _turn(say, session, LONG, LONG)
    ExtractionState.objects.create(session=session,
                                   retry_after=timezone.now() + timedelta(minutes=5))
    maybe_extract(str(session.id))
    assert jobs.pending() == []


# --- the job queue ---------------------------------------------------------------------------


def test_the_queue_keys_keep_their_format() -> None:
    # Changing one strands the jobs of running workers.
    assert (jobs.PENDING, jobs.RUNNING) == ("rtc:mem:x:pending", "rtc:mem:x:running")
    assert jobs.lock_key("a-b") == "rtc:mem:x:{a-b}:lock"


def test_a_session_is_never_extracted_twice_at_once() -> None:
    assert jobs.enqueue("s1") and not jobs.enqueue("s1")
    job = jobs.claim()
    assert job is not None and job.session_id == "s1" and jobs.running() == ["s1"]
    assert jobs.enqueue("s1")  # the conversation went on: queued again meanwhile ...
    assert jobs.claim() is None  # ... but not run while the first run lasts
    assert job.finish()
    again = jobs.claim()
    assert again is not None and again.session_id == "s1"


def test_a_released_job_is_first_in_line_again() -> None:
    jobs.enqueue("s1")
    job = jobs.claim()
    jobs.enqueue("s2")
    assert job.release()
    assert jobs.pending() == ["s1", "s2"] and jobs.running() == []


def test_a_vanished_runners_job_is_queued_again_by_the_sweep(settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "MEMORY_EXTRACT_LEASE_MS": 50}
    jobs.enqueue("s1")
    job = jobs.claim()
    assert jobs.sweep() == []  # the lease still runs
    time.sleep(0.1)
    assert jobs.sweep() == ["s1"] and jobs.pending() == ["s1"]
    taken = jobs.claim()
    assert not job.finish() and not job.renew(force=True)  # the old runner changes nothing
    assert taken is not None and jobs.running() == ["s1"]


# --- the LLM call ----------------------------------------------------------------------------

REPLY = {"tool_calls": [{"name": "save_session_memories", "arguments": {
    "decision": ["Chose PostgreSQL 16 for JSONB"],
    "progress": ["Schema for users and sessions is done"],
}}]}


def _expected_user_prompt(notes: str, sections: list[str]) -> str:
    return ("# Existing session notes\n" + notes
            + "\n\n# Conversation since the last extraction\n" + "\n\n".join(sections))


def test_the_extraction_sends_the_new_conversation_and_stores_the_notes(
    make_user, make_session, say, model, chat
) -> None:
    session = make_session(make_user())
    _turn(say, session, "Which database?", "PostgreSQL 16, for JSONB.", calls=1)
    model.add_rule({"tool_offered": "save_session_memories"}, REPLY)
    assert extract(str(session.id), chat) == 2
    (request,) = model.requests
    assert request.body["tools"] == [TOOL_SCHEMA]
    assert request.body["messages"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": _expected_user_prompt("(none yet)", [
            "## user\nWhich database?",
            '## assistant calls read\n{"path": "/f0"}',
            "## read returned (completed)\ncontents 0",
            "## assistant\nPostgreSQL 16, for JSONB.",
        ])},
    ]
    notes = list(SessionMemory.objects.filter(session=session).order_by("id")
                 .values_list("category", "content", "source"))
    assert notes == [("decision", "Chose PostgreSQL 16 for JSONB", "extraction"),
                     ("progress", "Schema for users and sessions is done", "extraction")]
    state = ExtractionState.objects.get(session=session)
    assert (state.last_offset, state.runs, state.retry_after) == (4, 1, None)
    # The call is billed to the session, outside any turn, without touching its context size.
    (call,) = LLMCall.objects.filter(session=session, purpose="extraction")
    assert call.turn_id is None and call.prompt_tokens > 0
    session.refresh_from_db()
    assert session.total_output_tokens >= call.completion_tokens > 0

    # The next one sends only what came since, with the notes it must not repeat.
    _turn(say, session, "Add an index?", "Yes, on email.")
    model.reset()
    model.add_rule({"tool_offered": "save_session_memories"},
                   {"tool_calls": [{"name": "save_session_memories",
                                    "arguments": {"decision": ["Index users.email"]}}]})
    assert extract(str(session.id), chat) == 1
    (request,) = model.requests
    assert request.body["messages"][1]["content"] == _expected_user_prompt(
        "- [decision] Chose PostgreSQL 16 for JSONB\n"
        "- [progress] Schema for users and sessions is done",
        ["## user\nAdd an index?", "## assistant\nYes, on email."])
    assert ExtractionState.objects.get(session=session).last_offset == 6


def test_only_the_newest_part_of_a_long_conversation_is_sent(make_user, make_session, say,
                                                             model, chat, settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "MEMORY_EXTRACT_TRANSCRIPT_TOKENS": 30}
    session = make_session(make_user())
    _turn(say, session, "old question " * 10, "old answer " * 10)
    _turn(say, session, "new question", "new answer")
    model.add_rule({"tool_offered": "save_session_memories"}, {"content": "nothing new"})
    assert extract(str(session.id), chat) == 0
    content = model.requests[0].body["messages"][1]["content"]
    assert "new question" in content and "old question" not in content
    assert ExtractionState.objects.get(session=session).last_offset == 4  # all of it was seen


def test_a_failed_call_stores_nothing_and_retries_later(make_user, make_session, say, model,
                                                        chat) -> None:
    session = make_session(make_user())
    _turn(say, session, "hi", "hello")
    model.add_rule({"tool_offered": "save_session_memories"},
                   {"error": {"status": 400, "message": "bad request"}})
    assert extract(str(session.id), chat) == 0
    state = ExtractionState.objects.get(session=session)
    assert state.last_offset == 0 and state.retry_after > timezone.now()
    assert not SessionMemory.objects.exists()


def test_invalid_items_are_skipped_and_valid_ones_kept(make_user, make_session, say, model,
                                                       chat) -> None:
    session = make_session(make_user())
    _turn(say, session, "hi", "hello")
    model.add_rule({"tool_offered": "save_session_memories"},
                   {"tool_calls": [{"name": "save_session_memories", "arguments": {
                       "decision": ["Keep this", "", 42], "issue": "not a list",
                       "mood": ["unknown category"]}}]})
    assert extract(str(session.id), chat) == 1
    assert list(SessionMemory.objects.values_list("content", flat=True)) == ["Keep this"]


def test_a_yielding_run_gives_the_job_back_and_writes_nothing(make_user, make_session, say,
                                                              model, chat) -> None:
    session = make_session(make_user())
    _turn(say, session, "hi", "hello")
    jobs.enqueue(str(session.id))
    assert run_next(lambda: chat, should_yield=lambda: True)
    assert jobs.pending() == [str(session.id)] and jobs.running() == []
    assert not SessionMemory.objects.exists() and not model.requests
    assert ExtractionState.objects.get(session=session).last_offset == 0
    model.add_rule({"tool_offered": "save_session_memories"}, REPLY)
    assert run_next(lambda: chat)
    assert jobs.pending() == [] and SessionMemory.objects.count() == 2
    assert not run_next(lambda: chat)  # nothing queued


def test_sessions_waiting_sees_claimable_work_only(make_user, make_session) -> None:
    from apps.turns import queue

    assert not extraction.sessions_waiting()
    sid = str(make_session(make_user()).id)
    queue.enqueue(sid, {"kind": "message", "message_id": "m"})
    assert extraction.sessions_waiting()
    hold = queue.claim(lease_ms=5000)
    assert hold is not None and not extraction.sessions_waiting()  # held by another worker
