"""The example script in docs/scripted-llm.md loads and behaves as the page says."""

from __future__ import annotations

import json
import re
from pathlib import Path

from apps.turns.llm import Finish, OpenAIChat, ReasoningDelta, TextDelta, ToolCall, Usage
from rtcagent.devtools.scripted_llm import ScriptedLLM

DOC = Path(__file__).resolve().parents[2] / "docs" / "scripted-llm.md"


def example_script() -> dict:
    blocks = re.findall(r"```json\n(.*?)```", DOC.read_text(), flags=re.S)
    return json.loads(blocks[-1])


def test_documented_example_runs_a_tool_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(example_script()))

    with ScriptedLLM(path, chunk_delay=0.0) as llm:  # the file's demo pace is overridden
        chat = OpenAIChat(api_key="sk-demo", base_url=llm.base_url, model="scripted-model")
        greeting = list(chat.stream([{"role": "user", "content": "hello"}], None))
        ask = [{"role": "user", "content": "What is in my notes?"}]
        first = list(chat.stream(ask, None))
        call = next(e for e in first if isinstance(e, ToolCall))
        follow_up = [
            *ask,
            {
                "role": "assistant",
                "content": "Let me open your notes.",
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call.id, "content": "- buy milk"},
        ]
        second = list(chat.stream(follow_up, None))

    text = "".join(e.text for e in greeting if isinstance(e, TextDelta))
    assert text == "Hello! Ask me what is in your notes."
    assert any(isinstance(e, ReasoningDelta) for e in first)
    assert (call.name, json.loads(call.arguments)) == ("read_file", {"path": "notes.md"})
    assert first[-1] == Finish("tool_calls")
    answer = "".join(e.text for e in second if isinstance(e, TextDelta))
    assert answer == "Your notes say you need to **buy milk**."
    assert Usage(412, 12, 384, 424) in second
