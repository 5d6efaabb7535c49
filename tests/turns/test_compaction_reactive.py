"""Reactive compact (exact requests): when the provider refuses a prompt as too long, or the
prompt is still over after auto compact, three escalating levels, one retry, then the
``context`` error; the level is in the checkpoint and survives a restart."""

from __future__ import annotations

from typing import Any

import pytest

from apps.sessions.models import Message
from apps.turns import state
from apps.turns.compaction import SUMMARIZER, SUMMARY_PROMPT
from apps.turns.conversation import SUMMARY_HEADER
from apps.turns.prompt import placeholder, truncate_output
from apps.turns.runner import HoldLost
from apps.turns.tokens import count_text
from apps.turns.worker import Worker
from tests.turns.test_compaction_auto import paragraph, setup_session
from tests.turns.test_context_kit import Agent, bodies, chat, set_profile, tool_reply
from tests.turns.test_context_layout import system

pytestmark = [pytest.mark.django_db(transaction=True)]

TOO_LONG = {"error": {"status": 400, "code": "context_length_exceeded",
                      "message": "This model's maximum context length is 8192 tokens."}}
PAGES = [f"page {i}: " + "data " * 300 for i in range(3)]


def outputs(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def three_reads(agent: Agent, model: Any, *replies: dict[str, Any]) -> None:
    """A turn reading three pages; ``replies`` answer the request that follows them."""
    set_profile(tool_result_budget=1000)
    for i in range(3):
        model.enqueue(tool_reply("read", {"path": f"/{i}"}))
    for reply in replies:
        model.enqueue(reply)
    agent.send("read three pages")
    agent.submit(PAGES[0])
    agent.submit(PAGES[1])


def trimmed() -> list[str]:
    """Level 1: a fifth of the budget for each output, only the two newest kept."""
    return [placeholder("read"), truncate_output(PAGES[1], 200, count_text),
            truncate_output(PAGES[2], 200, count_text)]


def test_a_refused_prompt_is_sent_again_at_level_1(model, make_user) -> None:
    agent = Agent(make_user(), model)
    three_reads(agent, model, TOO_LONG, {"content": "Three pages."})

    turn = agent.submit(PAGES[2])

    refused, retried = bodies(model)[3:]
    assert outputs(refused) == PAGES
    assert outputs(retried) == trimmed()
    assert retried["messages"][:2] == refused["messages"][:2]
    assert turn.status == "completed"
    assert Message.objects.get(session_id=agent.session_id,
                               content__data="Three pages.").streaming_status == "completed"


def test_a_second_refusal_is_the_context_error(model, make_user) -> None:
    agent = Agent(make_user(), model)
    three_reads(agent, model, TOO_LONG, TOO_LONG)

    turn = agent.submit(PAGES[2])

    assert len(bodies(model)) == 5  # three reads, the refused answer, one retry
    assert turn.status == "failed" and turn.error_message == "context: Conversation too long"
    error = Message.objects.get(session_id=agent.session_id, content__type="error")
    assert error.content["data"]["category"] == "context"
    assert state.checkpoint_load(str(turn.id)) is None


class DiesOnCall:
    """The worker process dies (its hold is lost) when it makes its ``n``-th model call."""

    def __init__(self, inner: Any, n: int) -> None:
        self.inner, self.n, self.calls = inner, n, 0
        self.model = inner.model

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == self.n:
            raise HoldLost("killed")
        return self.inner.stream(*args, **kwargs)


def test_the_level_and_the_retry_survive_a_restart(model, make_user) -> None:
    agent = Agent(make_user(), model)
    three_reads(agent, model, TOO_LONG, TOO_LONG)
    dying = DiesOnCall(chat(model.base_url), 2)  # the refused call, then death before the retry
    agent.worker = Worker(llm_factory=lambda: dying)
    with pytest.raises(HoldLost):
        agent.submit(PAGES[2])
    turn = agent.turn()
    saved = state.checkpoint_load(str(turn.id))
    assert saved["context"] == {"level": 1, "limit": saved["context"]["limit"], "retry": 3}

    agent.worker = Worker(llm_factory=lambda: chat(model.base_url))  # another process
    agent.worker.handle(agent.session_id, {"kind": "resume", "turn_id": str(turn.id)})

    refused, after_restart = bodies(model)[3:]
    assert outputs(refused) == PAGES
    assert outputs(after_restart) == trimmed()  # built at the saved level
    turn.refresh_from_db()
    assert turn.status == "failed"  # the retry was used before the restart: the error stands
    assert turn.error_message == "context: Conversation too long"


def long_text(tokens: int, word: str) -> str:
    text = f"{word} " * tokens
    assert abs(count_text(text) - tokens) < tokens * 0.05
    return text.strip()


def test_a_prompt_still_over_after_auto_compact_goes_to_level_2(model, make_user) -> None:
    agent = Agent(make_user(), model)
    setup_session(agent, model)
    verbose = long_text(3000, "detail")
    model.enqueue({"content": verbose})  # auto compact: a summary too long to help
    model.enqueue({"content": "Short summary."})  # level 2: minimal retention
    model.enqueue({"content": "Noted 4."})

    agent.send(paragraph(4))

    first, second, answer = bodies(model)[4:]
    assert first["messages"][1]["content"].endswith(SUMMARY_PROMPT)
    assert [m["role"] for m in second["messages"]] == ["system", "user"]
    assert second["messages"][0] == {"role": "system", "content": SUMMARIZER}
    asked = second["messages"][1]["content"]
    assert asked.startswith("<conversation>\n[Earlier summary]\n" + SUMMARY_HEADER + verbose)
    assert asked.endswith("[Assistant]\nNoted 3.\n</conversation>\n\n" + SUMMARY_PROMPT)
    assert answer["messages"] == [
        system(), {"role": "system", "content": SUMMARY_HEADER + "Short summary."},
        {"role": "user", "content": paragraph(4)},
    ]
    latest = agent.summaries()[-1]
    assert latest.content["data"][0]["content"] == "Short summary."
    assert latest.parent_message_id == Message.objects.get(
        session_id=agent.session_id, role="user", content__data__text=paragraph(4)).id
    assert agent.turn().status == "completed"


def test_level_3_cuts_the_summary_when_minimal_retention_is_not_enough(model, make_user
                                                                       ) -> None:
    agent = Agent(make_user(), model)
    setup_session(agent, model)
    verbose = long_text(3000, "detail")
    longer = long_text(4000, "point")
    model.enqueue({"content": verbose})
    model.enqueue({"content": longer})
    model.enqueue({"content": "Noted 4."})

    agent.send(paragraph(4))

    answer = bodies(model)[-1]
    assert len(bodies(model)) == 7  # two summaries, one answer
    cut = truncate_output(SUMMARY_HEADER + longer, 1312, count_text)  # a quarter of 5,250
    assert answer["messages"] == [
        system(), {"role": "system", "content": cut},
        {"role": "user", "content": paragraph(4)},
    ]
    assert agent.summaries()[-1].content["data"][0]["content"] == longer  # stored whole
    assert agent.turn().status == "completed"


def test_a_message_larger_than_the_window_fails_without_a_call(model, make_user) -> None:
    set_profile(context_window=6000, max_output_tokens=500, autocompact_buffer=1000)
    agent = Agent(make_user(), model)

    turn = agent.send(long_text(6000, "huge"))

    assert bodies(model) == []
    assert turn.status == "failed" and turn.error_message == "context: Conversation too long"
