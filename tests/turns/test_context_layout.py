"""The layout of every request (exact requests sent to the scripted model): the stable prefix
with pinned memory, the conversation, recalled memory at the end; the tools in a stable order,
server tools run in the worker; the tool-result budget; the shared prefix recorded per call."""

from __future__ import annotations

import json

import pytest

from apps.memory.models import UserMemory
from apps.memory.prompt import pinned_memory_text, recalled_memory_text
from apps.memory.services import user_memory_save
from apps.rtc.tools import schemas as browser_schemas
from apps.sessions.models import Message
from apps.turns import server_tools
from apps.turns.context import SYSTEM_PROMPT, message_parts
from apps.turns.models import LLMCall
from apps.turns.prompt import TRUNCATION_MARKER, truncate_output
from apps.turns.tokens import count_text
from tests.turns.test_context_kit import Agent, bodies, set_profile, tool_reply

pytestmark = [pytest.mark.django_db(transaction=True)]


def system(work_mode: str = "edit", extra: str = "") -> dict[str, str]:
    text = SYSTEM_PROMPT + f"\nWork mode: {work_mode}."
    return {"role": "system", "content": text + (f"\n\n{extra}" if extra else "")}


def test_pinned_memory_leads_and_recalled_memory_trails_every_request(model, make_user
                                                                       ) -> None:
    user = make_user()
    user_memory_save(user_id=user.id, content="Always answer in French.", category="feedback",
                     importance="critical")
    user_memory_save(user_id=user.id, content="Uses the vim editor for notes.",
                     category="user", importance="medium")
    model.enqueue(tool_reply("read", {"path": "/notes.md"}, content="Je regarde."))
    model.enqueue({"content": "Vos notes disent bonjour."})
    agent = Agent(user, model)

    agent.send("Open my notes in the editor", agent_prompt="You help with notes.")
    agent.submit("bonjour")

    pinned = pinned_memory_text(user.id)
    recalled = recalled_memory_text(user_id=user.id, session_id=agent.session_id,
                                    query="Open my notes in the editor")
    assert "Always answer in French." in pinned and "vim editor" in recalled
    head = [system(extra="You help with notes.\n\n" + pinned),
            {"role": "user", "content": "Open my notes in the editor"}]
    call = {"role": "assistant", "content": "Je regarde.", "tool_calls": [
        {"id": "call_0", "type": "function",
         "function": {"name": "read", "arguments": '{"path":"/notes.md"}'}}]}
    first, second = bodies(model)
    assert first["messages"] == [*head, {"role": "system", "content": recalled}]
    assert second["messages"] == [
        *head, call, {"role": "tool", "tool_call_id": "call_0", "content": "bonjour"},
        {"role": "system", "content": recalled},
    ]


def test_without_memories_nothing_is_added(model, make_user) -> None:
    model.enqueue({"content": "Hi."})
    Agent(make_user(), model).send("hello")

    (body,) = bodies(model)
    assert body["messages"] == [system(), {"role": "user", "content": "hello"}]


def test_tools_come_in_a_stable_order_and_server_tools_run_in_the_worker(model, make_user
                                                                          ) -> None:
    user = make_user()
    host = [{"name": "payInvoice", "description": "Pay", "class": "write",
             "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}}}]
    model.enqueue(tool_reply("saveMemory", {"content": "Prefers tea.", "category": "user"}))
    model.enqueue({"content": "Saved."})
    agent = Agent(user, model)

    turn = agent.send("remember I like tea", host_functions=host)

    assert turn.status == "completed"
    first, second = bodies(model)
    names = [t["function"]["name"] for t in first["tools"]]
    served = server_tools.names()
    assert "saveMemory" in served and served == sorted(served)
    assert names == [t["function"]["name"] for t in browser_schemas()] + ["payInvoice", *served]
    assert second["tools"] == first["tools"]
    (memory,) = UserMemory.objects.filter(user=user)
    assert (memory.content, memory.session_id) == ("Prefers tea.", agent.session.id)
    result = second["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "call_0"
    stored = Message.objects.get(session_id=agent.session_id, content__type="toolcall_output")
    assert stored.content["data"]["output"] == result["content"]
    assert stored.content["data"]["status"] == "done"


def test_a_tool_output_over_its_budget_is_cut_in_what_is_sent_only(model, make_user) -> None:
    set_profile(tool_result_budget=300)
    listing = "".join(f"src/module_{i}/file_{i}.py\n" for i in range(800))
    model.enqueue(tool_reply("find", {"pattern": "**/*.py"}))
    model.enqueue({"content": "Many files."})
    agent = Agent(make_user(), model)

    agent.send("list the python files")
    agent.submit(listing)

    sent = bodies(model)[1]["messages"][-1]["content"]
    assert sent == truncate_output(listing, 300, count_text)
    assert TRUNCATION_MARKER in sent and count_text(sent) <= 300
    assert sent.startswith("src/module_0/file_0.py\n")
    assert sent.endswith("src/module_799/file_799.py\n")
    stored = Message.objects.get(session_id=agent.session_id, content__type="toolcall_output")
    assert stored.content["data"]["output"] == listing  # the user still sees everything


def test_each_call_records_its_shared_prefix_with_the_previous_request(model, make_user) -> None:
    model.enqueue(tool_reply("read", {"path": "/a"}))
    model.enqueue({"content": "A says a."})
    model.enqueue({"content": "Bye."})
    agent = Agent(make_user(), model)

    agent.send("read a")
    agent.submit("a" * 400)
    agent.send("thanks")

    requests = [(b["messages"], b["tools"]) for b in bodies(model)]
    parts = [message_parts(m, t) for m, t in requests]
    calls = list(LLMCall.objects.filter(session_id=agent.session_id).order_by("id"))
    assert calls[0].shared_prefix_ratio is None
    for before, now, call in zip(parts[:-1], parts[1:], calls[1:], strict=True):
        total = sum(n for _, n in now) + 3
        shared = sum(n for _, n in now[:len(before)])  # each request extends the previous one
        assert [p[0] for p in now[:len(before)]] == [p[0] for p in before]
        assert call.shared_prefix_ratio == pytest.approx(shared / total)
        assert call.prompt_estimate == total
    assert calls[2].shared_prefix_ratio > 0.8
    assert json.dumps(requests[2][0]).startswith(json.dumps(requests[1][0])[:-1])
