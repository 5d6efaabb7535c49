"""Microcompact (exact requests): old outputs of ls/read/write/grep/find/script become a
placeholder in what is sent, when the prompt cache has gone cold or the prompt reaches the
threshold, never while the cache is warm; the stored messages never change; no LLM call."""

from __future__ import annotations

from typing import Any

import pytest

from apps.sessions.models import Message
from apps.turns.prompt import placeholder
from apps.turns.tokens import count_text
from tests.turns.test_context_kit import Agent, bodies, set_profile, tool_reply

pytestmark = [pytest.mark.django_db(transaction=True)]


def outputs(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def run_tools(agent: Agent, model: Any, calls: list[tuple[str, dict[str, Any], str]],
              text: str) -> None:
    """One turn that makes ``calls`` one after the other, the browser answering each."""
    for name, arguments, _ in calls:
        model.enqueue(tool_reply(name, arguments))
    model.enqueue({"content": "Done."})
    agent.send(text)
    for _, _, result in calls:
        agent.submit(result)


def test_old_outputs_are_cleared_once_the_cache_is_cold_and_stay_cleared(model, make_user
                                                                         ) -> None:
    set_profile(keep_recent_tool_results=2)
    agent = Agent(make_user(), model)
    calls = [("read", {"path": "/1"}, "one"), ("edit", {"path": "/1", "old_string": "o",
                                                        "new_string": "0",}, "edited"),
             ("grep", {"pattern": "x"}, "two"), ("read", {"path": "/3"}, "three"),
             ("ls", {}, "four")]
    run_tools(agent, model, calls, "look around")
    warm = bodies(model)[-1]
    assert outputs(warm) == ["one", "edited", "two", "three", "four"]  # warm: nothing moves

    agent.cold()
    model.enqueue(tool_reply("find", {"pattern": "*"}))
    model.enqueue({"content": "Found."})
    agent.send("and now?")
    agent.submit("five")

    cold_first, cold_second = bodies(model)[-2:]
    cleared = [placeholder("read"), "edited", placeholder("grep"), "three", "four"]
    assert outputs(cold_first) == cleared  # edit is not a compactable tool
    assert outputs(cold_second) == [*cleared, "five"]  # sticky while warm again
    prefix = len(cold_first["messages"])
    assert cold_second["messages"][:prefix] == cold_first["messages"]
    assert [m.content["data"]["output"] for m in Message.objects.filter(
        session_id=agent.session_id, content__type="toolcall_output").order_by("global_offset")
    ] == ["one", "edited", "two", "three", "four", "five"]


def test_reaching_the_threshold_clears_old_outputs_before_any_summary(model, make_user) -> None:
    # The tool schemas and the system prompt take about 1,760 tokens; each page about 1,000.
    set_profile(context_window=6510, max_output_tokens=500, autocompact_buffer=1000,
                keep_recent_tool_results=1, tool_result_budget=1200)
    page = "word " * 1000
    assert 950 < count_text(page) < 1050
    agent = Agent(make_user(), model)
    calls = [("read", {"path": f"/{i}"}, page) for i in range(4)]

    run_tools(agent, model, calls, "read four pages")

    sent = bodies(model)
    assert len(sent) == 5  # four calls and the answer: no summary request
    assert outputs(sent[3]) == [page] * 3  # under the threshold: nothing cleared
    assert outputs(sent[4]) == [placeholder("read")] * 3 + [page]
    assert agent.summaries() == []
    assert agent.turn().status == "completed"
