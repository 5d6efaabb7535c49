"""``v1.session.compact`` in the worker (exact requests): the custom instruction steers the
summary, the recent tail is kept, one compaction per session at a time, and a history twice the
window is summarised in chunks."""

from __future__ import annotations

import pytest

from apps.sessions.models import Message
from apps.turns.compaction import (
    CONTINUED,
    SUMMARIZER,
    SUMMARY_PROMPT,
    SUMMARY_TITLE,
    request_compaction,
)
from apps.turns.conversation import SUMMARY_HEADER
from apps.turns.models import LLMCall
from apps.turns.tokens import count_messages
from tests.turns.test_context_kit import Agent, bodies, set_profile
from tests.turns.test_context_layout import system

pytestmark = [pytest.mark.django_db(transaction=True)]


def chat_turns(agent: Agent, model, count: int, text: str = "message {}") -> None:
    for i in range(count):
        model.enqueue({"content": f"answer {i}"})
        agent.send(text.format(i))


def compact(agent: Agent, instruction: str = "") -> None:
    """What ``v1.session.compact`` queues, run by the worker."""
    assert request_compaction(agent.session, instruction)
    agent.worker.handle(agent.session_id, {"kind": "compact", "session_id": agent.session_id,
                                           "instruction": instruction})


def test_the_instruction_steers_the_summary_and_the_tail_is_kept(model, make_user) -> None:
    agent = Agent(make_user(), model)
    chat_turns(agent, model, 2)
    model.enqueue({"content": "The user sent two messages."})

    compact(agent, "Keep the names of people.")

    asked = bodies(model)[-1]
    assert asked["messages"] == [
        {"role": "system", "content": SUMMARIZER + (
            "\n\nThe user asked for this summary with an instruction. Let it decide what to "
            "keep in detail and what to shorten, within the nine sections:\n<instruction>\n"
            "Keep the names of people.\n</instruction>")},
        {"role": "user", "content": "<conversation>\n[User]\nmessage 0\n\n[Assistant]\nanswer 0"
                                    f"\n</conversation>\n\n{SUMMARY_PROMPT}"},
    ]
    assert asked["messages"][1]["content"].endswith(SUMMARY_PROMPT)  # steering, not appended
    (summary,) = agent.summaries()
    assert summary.content["data"] == [{"title": SUMMARY_TITLE,
                                        "content": "The user sent two messages."}]
    kept = Message.objects.get(session_id=agent.session_id, role="user",
                               content__data__text="message 1")
    assert summary.parent_message_id == kept.id
    assert agent.session.current_context_tokens > 0  # the ring shows the compacted size
    # The summary call is billed to the session, outside any turn.
    (call,) = LLMCall.objects.filter(session_id=agent.session_id, purpose="compaction")
    assert call.turn_id is None and call.prompt_tokens > 0 and call.completion_tokens > 0
    agent.session.refresh_from_db()
    billed = LLMCall.objects.filter(session_id=agent.session_id)
    assert agent.session.total_input_tokens == sum(c.prompt_tokens for c in billed)

    model.enqueue({"content": "answer 2"})
    agent.send("message 2")
    assert bodies(model)[-1]["messages"] == [
        system(), {"role": "system", "content": SUMMARY_HEADER + "The user sent two messages."},
        {"role": "user", "content": "message 1"}, {"role": "assistant", "content": "answer 1"},
        {"role": "user", "content": "message 2"},
    ]


def test_one_compaction_per_session_at_a_time(model, make_user) -> None:
    agent = Agent(make_user(), model)
    chat_turns(agent, model, 2)

    assert request_compaction(agent.session, "")
    assert not request_compaction(agent.session, "again")  # deduplicated
    model.enqueue({"content": "Summary."})
    agent.worker.handle(agent.session_id, {"kind": "compact", "session_id": agent.session_id,
                                           "instruction": ""})

    assert len(agent.summaries()) == 1
    assert request_compaction(agent.session, "")  # done: the next one may be queued


def test_nothing_happens_without_enough_conversation_or_when_the_model_fails(model, make_user
                                                                             ) -> None:
    agent = Agent(make_user(), model)
    model.enqueue({"error": {"status": 401, "message": "Incorrect API key provided"}})
    assert agent.send("hello").status == "failed"
    model.reset()

    compact(agent)  # one message, no answer: nothing a summary would replace
    assert bodies(model) == [] and agent.summaries() == []

    chat_turns(agent, model, 1)
    model.enqueue({"error": {"status": 500, "message": "upstream failed"}})
    compact(agent)
    assert len(bodies(model)) == 2  # the turn, the failed summary request
    assert agent.summaries() == []
    assert request_compaction(agent.session, "")  # the failed one released its slot


def test_a_history_twice_the_window_is_summarised_in_chunks(model, make_user) -> None:
    agent = Agent(make_user(), model)
    chat_turns(agent, model, 12, "message {} " + "filler words here " * 160)  # ~6,000 tokens
    window = 3000  # the operator moves the session to a smaller model
    set_profile(context_window=window, max_output_tokens=500, autocompact_buffer=1000)
    for i in range(10):
        model.enqueue({"content": f"summary part {i}"})

    compact(agent)

    asked = [b["messages"] for b in bodies(model)[12:]]
    assert len(asked) >= 3
    assert asked[0][1]["content"].startswith("<conversation>\n[User]\nmessage 0 ")
    for n, messages in enumerate(asked):
        assert messages[0] == {"role": "system", "content": SUMMARIZER}
        assert count_messages(messages) + 500 <= window  # each call fits the window
        text = messages[1]["content"]
        assert text.endswith(SUMMARY_PROMPT)
        if n:  # each chunk extends the summary so far
            assert text.startswith(CONTINUED + f"<summary_so_far>\nsummary part {n - 1}\n"
                                   "</summary_so_far>\n\n<conversation>\n")
    (summary,) = agent.summaries()
    assert summary.content["data"][0]["content"] == f"summary part {len(asked) - 1}"
    model.reset()
