"""What each reactive level sends of the same conversation (``context.assemble``, no I/O)."""

from __future__ import annotations

from apps.turns.context import LEVELS, assemble
from apps.turns.conversation import Block, Conversation, ToolResult
from apps.turns.profiles import ModelProfile
from apps.turns.prompt import placeholder, truncate_output
from apps.turns.tokens import count_text

PROFILE = ModelProfile(name="m", context_window=20_000, autocompact_buffer=4_000,
                       tool_result_budget=1_000)
OUTPUT = "x " * 900  # about 900 tokens: within the budget, over a fifth of it


def answer(n: int, name: str) -> Block:
    call = {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": "{}"}}
    return Block("answer", [{"role": "assistant", "content": None, "tool_calls": [call]},
                            {"role": "tool", "tool_call_id": f"c{n}", "content": OUTPUT}],
                 results=[ToolResult(1, name, "{}", OUTPUT, offset=n)])


def conversation() -> Conversation:
    return Conversation(blocks=[
        Block("summary", [{"role": "system", "content": "Summary of the conversation:\n"
                                                        + "s " * 5000}]),
        Block("files", [{"role": "system", "content": "Files:\n" + "f " * 3000}]),
        Block("user", [{"role": "user", "content": "go"}], text=True),
        answer(1, "read"), answer(2, "askUser"), answer(3, "grep"), answer(4, "ls"),
        answer(5, "read"),
    ])


def sent(level: int, cleared: int = 0) -> list[dict]:
    return assemble(conversation(), LEVELS[level], cleared, profile=PROFILE, system="sys",
                    recalled="")


def tools(messages: list[dict]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "tool"]


def test_level_0_sends_everything_but_what_microcompact_cleared() -> None:
    assert tools(sent(0)) == [OUTPUT] * 5
    assert tools(sent(0, cleared=3)) == [placeholder("read"), OUTPUT, placeholder("grep"),
                                         OUTPUT, OUTPUT]  # askUser is never cleared


def test_level_1_trims_outputs_and_keeps_only_the_two_newest() -> None:
    short = truncate_output(OUTPUT, 200, count_text)
    assert tools(sent(1)) == [placeholder("read"), short, placeholder("grep"), short, short]


def test_level_2_sends_half_the_reinjected_files() -> None:
    messages = sent(2)
    assert messages[2]["content"] == truncate_output("Files:\n" + "f " * 3000, 800, count_text)
    assert tools(messages) == tools(sent(1))


def test_level_3_keeps_only_the_latest_answer_and_cuts_the_summary() -> None:
    messages = sent(3)
    assert [m["role"] for m in messages[:3]] == ["system", "system", "user"]  # files dropped
    assert messages[1]["content"] == truncate_output(
        "Summary of the conversation:\n" + "s " * 5000, 4000, count_text)
    assert tools(messages) == [placeholder("read"), placeholder("askUser"), placeholder("grep"),
                               placeholder("ls"), truncate_output(OUTPUT, 50, count_text)]
