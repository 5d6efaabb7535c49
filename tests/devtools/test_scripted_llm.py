"""The scripted OpenAI-compatible server: wire format, script semantics, recording and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from rtcagent.devtools.llm_script import DEFAULT_REPLY
from rtcagent.devtools.scripted_llm import ScriptedLLM

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def server() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as llm:
        yield llm


def client(server: ScriptedLLM, key: str = "sk-test") -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=server.base_url, max_retries=0, timeout=5)


def post(url: str, payload: Any, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(  # noqa: S310 - a local http:// URL
        url,
        data=json.dumps(payload).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def sse_events(raw: bytes) -> list[Any]:
    frames = [f for f in raw.decode().split("\n\n") if f]
    assert all(f.startswith("data: ") for f in frames)
    return [f[6:] if f[6:] == "[DONE]" else json.loads(f[6:]) for f in frames]


def test_stream_wire_format_matches_the_official_api(server: ScriptedLLM) -> None:
    server.enqueue(
        {
            "content": "Hi!",
            "reasoning": "hmm",
            "tool_calls": [{"name": "read_file", "arguments": {"path": "a"}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "cached_tokens": 8},
            "chunk_size": 50,
        }
    )

    status, raw = post(
        server.base_url + "/chat/completions",
        {
            "model": "m",
            "messages": USER,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )

    events = sse_events(raw)
    assert status == 200
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    deltas = [c["choices"][0]["delta"] for c in chunks[:-1]]
    assert deltas == [
        {"role": "assistant", "content": "", "refusal": None},
        {"reasoning_content": "hmm"},
        {"content": "Hi!"},
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": ""},
                }
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"path":"a"}'}}]},
        {},
    ]
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * 5 + ["tool_calls"]
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 8
    assert chunks[-1]["usage"]["total_tokens"] == 13


def test_stream_without_include_usage_has_no_usage_chunk(server: ScriptedLLM) -> None:
    server.enqueue({"content": "ok"})

    _, raw = post(
        server.base_url + "/chat/completions", {"model": "m", "messages": USER, "stream": True}
    )

    chunks = sse_events(raw)[:-1]
    assert all(c["choices"] for c in chunks)
    assert all("usage" not in c for c in chunks)


def test_openai_stream_helper_accumulates_tool_calls(server: ScriptedLLM) -> None:
    server.enqueue(
        {
            "content": "Looking.",
            "tool_calls": [
                {"id": "call_x", "name": "a", "arguments": {"n": 1}},
                {"id": "call_y", "name": "b", "arguments": {"n": 2}},
            ],
        }
    )

    with client(server).chat.completions.stream(model="m", messages=USER) as stream:
        final = stream.get_final_completion()

    message = final.choices[0].message
    assert message.content == "Looking."
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls] == [
        ("call_x", "a", '{"n":1}'),
        ("call_y", "b", '{"n":2}'),
    ]
    assert final.choices[0].finish_reason == "tool_calls"


def test_non_streaming_completion(server: ScriptedLLM) -> None:
    server.enqueue(
        {
            "content": "plain answer",
            "reasoning": "why",
            "usage": {"prompt_tokens": 5, "completion_tokens": 2},
        }
    )

    result = client(server).chat.completions.create(model="gpt-x", messages=USER)

    assert result.object == "chat.completion"
    assert result.model == "gpt-x"
    assert result.choices[0].message.content == "plain answer"
    assert result.choices[0].message.model_extra["reasoning_content"] == "why"
    assert result.choices[0].finish_reason == "stop"
    assert (result.usage.prompt_tokens, result.usage.total_tokens) == (5, 7)


def test_default_chunk_delay_paces_the_stream() -> None:
    with ScriptedLLM(chunk_delay=0.05) as server:
        server.enqueue({"content": "abcdefgh", "chunk_size": 2})
        started = time.monotonic()
        with client(server).chat.completions.create(
            model="m", messages=USER, stream=True
        ) as stream:
            arrivals = [time.monotonic() - started for c in stream if c.choices]

    # role, 4 content deltas, finish: 6 chunks, each 0.05 s after the previous one
    assert len(arrivals) == 6
    assert arrivals[-1] >= 0.3
    assert arrivals[-1] - arrivals[0] >= 0.25


def test_models_are_listed(server: ScriptedLLM) -> None:
    models = client(server).models.list()

    assert [m.id for m in models.data] == ["scripted-model"]
    assert server.requests[0].path == "/v1/models"


def test_default_reply_when_the_script_is_exhausted(server: ScriptedLLM) -> None:
    result = client(server).chat.completions.create(model="m", messages=USER)

    assert result.choices[0].message.content == DEFAULT_REPLY["content"]


def test_replies_are_consumed_in_order(server: ScriptedLLM) -> None:
    for text in ("one", "two"):
        server.enqueue({"content": text})
    api = client(server)

    answers = [
        api.chat.completions.create(model="m", messages=USER).choices[0].message.content
        for _ in range(3)
    ]

    assert answers == ["one", "two", DEFAULT_REPLY["content"]]


def test_rules_drive_a_tool_round_trip_without_looping(server: ScriptedLLM) -> None:
    server.add_rule(
        {"last_user_contains": "WEATHER"},
        {"tool_calls": [{"id": "call_w", "name": "weather", "arguments": {}}]},
    )
    server.add_rule({"last_tool_result_contains": "sunny"}, {"content": "It is sunny."})
    api = client(server)
    conversation: list[dict[str, Any]] = [{"role": "user", "content": "what's the weather?"}]

    first = api.chat.completions.create(model="m", messages=conversation).choices[0]
    conversation += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_w",
                    "type": "function",
                    "function": {"name": "weather", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_w", "content": "Sunny, 21 C"},
    ]
    second = api.chat.completions.create(model="m", messages=conversation).choices[0]
    follow_up = [
        *conversation,
        {"role": "assistant", "content": "It is sunny."},
        {"role": "user", "content": "thanks"},
    ]
    third = api.chat.completions.create(model="m", messages=follow_up).choices[0]

    assert first.finish_reason == "tool_calls"
    assert first.message.tool_calls[0].function.name == "weather"
    assert second.message.content == "It is sunny."
    assert third.message.content == DEFAULT_REPLY["content"]


def test_rules_win_over_the_queue_and_times_limits_them(server: ScriptedLLM) -> None:
    server.enqueue({"content": "queued"})
    server.add_rule({"tool_offered": "search"}, {"content": "ruled"}, times=1)
    tools = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
    api = client(server)

    answers = [
        api.chat.completions.create(model="m", messages=USER, tools=tools)
        .choices[0]
        .message.content
        for _ in range(2)
    ]

    assert answers == ["ruled", "queued"]


def test_invalid_replies_are_refused_at_enqueue(server: ScriptedLLM) -> None:
    with pytest.raises(ValueError, match="contnet"):
        server.enqueue({"contnet": "typo"})
    with pytest.raises(ValueError, match="status"):
        server.enqueue({"error": {"message": "no status"}})
    with pytest.raises(ValueError, match="when"):
        server.add_rule({"last_user_says": "x"}, {"content": "y"})

    assert server.script.pending() == 0


def test_bad_requests_are_answered_like_the_api(server: ScriptedLLM) -> None:
    server.enqueue({"content": "kept"})

    no_model = post(server.base_url + "/chat/completions", {"messages": USER})
    no_messages = post(server.base_url + "/chat/completions", {"model": "m", "messages": []})
    unknown = post(server.base_url + "/embeddings", {"model": "m"})

    assert no_model[0] == 400
    assert json.loads(no_model[1])["error"]["param"] == "model"
    assert no_messages[0] == 400
    assert unknown[0] == 404
    assert server.script.pending() == 1  # refused requests consume nothing
    assert [r.outcome for r in server.wait_for_requests(3)] == ["invalid", "invalid", "invalid"]


def test_required_api_key_is_enforced() -> None:
    with ScriptedLLM(api_key="sk-right") as server:
        with pytest.raises(openai.AuthenticationError):
            client(server, key="sk-wrong").chat.completions.create(model="m", messages=USER)
        ok = client(server, key="sk-right").chat.completions.create(model="m", messages=USER)

    assert ok.choices[0].message.content == DEFAULT_REPLY["content"]


def test_reset_forgets_replies_rules_and_requests(server: ScriptedLLM) -> None:
    server.enqueue({"content": "a"})
    server.add_rule({"last_role": "user"}, {"content": "b"})
    client(server).models.list()

    server.reset()

    assert server.requests == []
    assert server.script.pending() == 0
    result = client(server).chat.completions.create(model="m", messages=USER)
    assert result.choices[0].message.content == DEFAULT_REPLY["content"]


def test_script_file_is_loaded(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps(
            {
                "model": "demo-model",
                "replies": [{"content": "from the file"}],
                "rules": [{"when": {"last_user_contains": "ping"}, "reply": {"content": "pong"}}],
            }
        )
    )

    with ScriptedLLM(path) as server:
        api = client(server)
        pong = api.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Ping?"}]
        )
        queued = api.chat.completions.create(model="m", messages=USER)
        models = api.models.list()

    assert pong.choices[0].message.content == "pong"
    assert queued.choices[0].message.content == "from the file"
    assert [m.id for m in models.data] == ["demo-model"]


def test_control_endpoints_script_a_server_in_another_process(server: ScriptedLLM) -> None:
    root = server.base_url.removesuffix("/v1")

    status, _ = post(root + "/__scripted__/replies", [{"content": "via http"}])
    bad, _ = post(root + "/__scripted__/replies", {"colour": "red"})
    result = client(server).chat.completions.create(model="m", messages=USER)
    with urllib.request.urlopen(root + "/__scripted__/requests", timeout=5) as response:  # noqa: S310
        recorded = json.loads(response.read())

    assert (status, bad) == (200, 400)
    assert result.choices[0].message.content == "via http"
    assert [r["body"]["messages"] for r in recorded] == [USER]
    assert recorded[0]["headers"]["authorization"] == "Bearer sk-test"


def test_cli_starts_and_answers(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "hello from the CLI"}]))
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rtcagent.devtools.scripted_llm",
            "--port",
            "0",
            "--script",
            str(script),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("scripted LLM listening on http://127.0.0.1:")
        base_url = line.split()[-1]
        api = openai.OpenAI(api_key="x", base_url=base_url, max_retries=0, timeout=5)
        with api.chat.completions.create(
            model="m", messages=USER, stream=True, stream_options={"include_usage": True}
        ) as stream:
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    finally:
        process.terminate()
        code = process.wait(timeout=5)

    assert text == "hello from the CLI"
    assert code == 0


def test_system_messages_after_the_conversation_do_not_hide_the_question() -> None:
    from rtcagent.devtools.llm_script import matches

    tail = {"role": "system", "content": "Reminder: the goal is active"}
    asked = {"messages": [{"role": "system", "content": "sys"},
                          {"role": "user", "content": "weather?"}, tail]}
    assert matches({"last_user_contains": "weather"}, asked)
    assert matches({"system_contains": "goal is active"}, asked)
    answered = {"messages": [{"role": "user", "content": "weather?"},
                             {"role": "tool", "tool_call_id": "c", "content": "sunny"}, tail]}
    assert matches({"last_tool_result_contains": "sunny"}, answered)
    assert not matches({"last_user_contains": "weather"}, answered)
    assert matches({"last_role": "system"}, {"messages": [tail]})  # nothing else to answer
