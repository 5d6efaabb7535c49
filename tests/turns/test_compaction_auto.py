"""Auto compact and session-memory compact (exact requests): at the threshold the older part
of the conversation becomes a readable ``summary`` message, the recent tail is kept, the files
read before are re-injected; with session memory no LLM call is made."""

from __future__ import annotations

from typing import Any

import pytest

from apps.memory.prompt import recalled_memory_text, session_memory_summary
from apps.memory.services import session_memory_add
from apps.sessions.models import Message
from apps.turns.compaction import MEMORY_TITLE, SUMMARIZER, SUMMARY_PROMPT, SUMMARY_TITLE
from apps.turns.conversation import FILES_HEADER, SUMMARY_HEADER
from apps.turns.models import LLMCall
from apps.turns.prompt import truncate_output
from apps.turns.tokens import count_text
from tests.turns.test_context_kit import Agent, bodies, set_profile, tool_reply
from tests.turns.test_context_layout import system

pytestmark = [pytest.mark.django_db(transaction=True)]

SPEC = "".join(f"spec line {i}: the widget must do thing {i}\n" for i in range(60))


def paragraph(n: int) -> str:
    return f"Paragraph {n}: " + "lorem ipsum " * 500


def setup_session(agent: Agent, model: Any) -> None:
    """Three turns (a read, then two messages of 1,000 tokens): about 4,300 tokens with the
    tools, under the 5,250-token threshold; the fourth message takes it over."""
    set_profile(context_window=6250, max_output_tokens=500, autocompact_buffer=1000,
                tool_result_budget=2000)
    model.enqueue(tool_reply("read", {"path": "/spec.md"}, content="Reading the spec."))
    model.enqueue({"content": "Spec read."})
    model.enqueue({"content": "Noted 2."})
    model.enqueue({"content": "Noted 3."})
    agent.send("read the spec")
    agent.submit(SPEC)
    agent.send(paragraph(2))
    agent.send(paragraph(3))
    assert agent.summaries() == [] and len(bodies(model)) == 4


def head_text() -> str:
    return (
        "[User]\nread the spec\n\n"
        "[Assistant]\nReading the spec.\n"
        '[Tool call] read {"path":"/spec.md"}\n'
        f"[Tool result of read]\n{SPEC}\n\n"
        "[Assistant]\nSpec read.\n\n"
        f"[User]\n{paragraph(2)}\n\n"
        "[Assistant]\nNoted 2.\n\n"
        f"[User]\n{paragraph(3)}"
    )


def test_the_threshold_summarises_the_head_keeps_the_tail_and_reinjects_files(model, make_user
                                                                              ) -> None:
    agent = Agent(make_user(), model)
    setup_session(agent, model)
    model.enqueue({"content": "1. The user wants the widget spec read."})
    model.enqueue({"content": "Noted 4."})

    agent.send(paragraph(4))

    summary_request, answer_request = bodies(model)[4:]
    assert summary_request["messages"] == [
        {"role": "system", "content": SUMMARIZER},
        {"role": "user",
         "content": f"<conversation>\n{head_text()}\n</conversation>\n\n{SUMMARY_PROMPT}"},
    ]
    assert "tools" not in summary_request
    (summary,) = agent.summaries()
    spec = truncate_output(SPEC, 105, count_text)  # 525 tokens of files, 105 a file
    assert summary.role == "system"
    assert summary.content["data"] == [
        {"title": SUMMARY_TITLE, "content": "1. The user wants the widget spec read."},
        {"title": "File: /spec.md", "content": spec},
    ]
    noted = Message.objects.get(session_id=agent.session_id, content__data="Noted 3.")
    assert summary.parent_message_id == noted.id  # the tail starts at the answer "Noted 3."
    assert answer_request["messages"] == [
        system(),
        {"role": "system",
         "content": SUMMARY_HEADER + "1. The user wants the widget spec read."},
        {"role": "system",
         "content": FILES_HEADER + f'<file path="/spec.md">\n{spec}\n</file>'},
        {"role": "assistant", "content": "Noted 3."},
        {"role": "user", "content": paragraph(4)},
    ]
    assert agent.turn().status == "completed"
    # the summary call is billed with the turn, without moving the context figures
    calls = LLMCall.objects.filter(turn=agent.turn()).order_by("id")
    assert [c.prompt_estimate == 0 for c in calls] == [True, False]

    model.enqueue({"content": "Noted 5."})
    agent.send("and five")
    assert bodies(model)[-1]["messages"] == [
        *answer_request["messages"], {"role": "assistant", "content": "Noted 4."},
        {"role": "user", "content": "and five"},
    ]


def test_session_memory_is_the_summary_without_an_llm_call(model, make_user) -> None:
    user = make_user()
    agent = Agent(user, model)
    setup_session(agent, model)
    session_memory_add(user_id=user.id, session_id=agent.session_id, entries=[
        ("decision", "The widget follows the spec in /spec.md."),
        ("progress", "The spec was read; two paragraphs of notes were given."),
    ])
    model.enqueue({"content": "Noted 4."})

    agent.send(paragraph(4))

    (answer_request,) = bodies(model)[4:]  # no summary request
    notes = session_memory_summary(agent.session_id)
    (summary,) = agent.summaries()
    assert summary.content["data"][0] == {"title": MEMORY_TITLE, "content": notes}
    recalled = recalled_memory_text(user_id=user.id, session_id=agent.session_id,
                                    query=paragraph(4))
    assert recalled  # the latest session notes travel at the end of every request
    spec = truncate_output(SPEC, 105, count_text)
    assert answer_request["messages"] == [
        system(),
        {"role": "system", "content": SUMMARY_HEADER + notes},
        {"role": "system",
         "content": FILES_HEADER + f'<file path="/spec.md">\n{spec}\n</file>'},
        {"role": "assistant", "content": "Noted 3."},
        {"role": "user", "content": paragraph(4)},
        {"role": "system", "content": recalled},
    ]
