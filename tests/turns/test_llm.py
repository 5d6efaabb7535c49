"""OpenAIChat against the real scripted server with the real openai client: streaming, tool calls,
usage, what was sent, retries and cancellation."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest

from apps.turns.llm import (
    Cancelled,
    Finish,
    OpenAIChat,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    Usage,
)
from apps.turns.llm_errors import LLMError
from rtcagent.devtools.scripted_llm import ScriptedLLM

KEY = "sk-test-0123456789abcdef"
USER = [{"role": "user", "content": "hi"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file in the user's browser workspace",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


@pytest.fixture
def server() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as llm:
        yield llm


def make_chat(server: ScriptedLLM, **options: object) -> OpenAIChat:
    defaults: dict[str, object] = {
        "api_key": KEY,
        "base_url": server.base_url,
        "model": "scripted-model",
        "timeout": 5.0,
        "backoff_base": 0.01,
        "backoff_max": 0.05,
    }
    defaults.update(options)
    return OpenAIChat(**defaults)  # type: ignore[arg-type]


def test_text_streams_in_chunks_in_order(server: ScriptedLLM) -> None:
    server.enqueue({"content": "The quick brown fox.", "chunk_size": 3})

    events = list(make_chat(server).stream(USER, None))

    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert texts == ["The", " qu", "ick", " br", "own", " fo", "x."]
    assert "".join(texts) == "The quick brown fox."
    assert isinstance(events[-1], Finish)
    assert events[-1].reason == "stop"


def test_consecutive_requests_share_one_connection(server: ScriptedLLM) -> None:
    """Each answer is read to the end of its response (past ``[DONE]``), so its connection
    goes back to the pool: the next request (a resume, the next turn) pays no new connection,
    which with a real provider is a TLS handshake."""
    chat = make_chat(server)
    for text in ("one", "two", "three"):
        server.enqueue({"content": text})
        texts = [e.text for e in chat.stream(USER, None) if isinstance(e, TextDelta)]
        assert "".join(texts) == text
    peers = {r.peer for r in server.requests}
    assert len(server.requests) == 3 and len(peers) == 1 and None not in peers


def test_reasoning_deltas_come_before_the_text(server: ScriptedLLM) -> None:
    server.enqueue({"reasoning": "Think first.", "content": "Answer.", "chunk_size": 6})

    events = list(make_chat(server).stream(USER, None))

    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "ReasoningDelta",
        "ReasoningDelta",
        "TextDelta",
        "TextDelta",
        "Usage",
        "Finish",
    ]
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "Think first."
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Answer."


def test_two_tool_calls_come_out_complete_and_in_order(server: ScriptedLLM) -> None:
    server.enqueue(
        {
            "content": "Let me look.",
            "tool_calls": [
                {"id": "call_a", "name": "read_file", "arguments": {"path": "notes/todo.md"}},
                {"id": "call_b", "name": "list_dir", "arguments": '{"path": "src", "depth": 2}'},
            ],
            "chunk_size": 5,
        }
    )

    events = list(make_chat(server).stream(USER, TOOLS))

    calls = [e for e in events if isinstance(e, ToolCall)]
    assert calls == [
        ToolCall(id="call_a", name="read_file", arguments='{"path":"notes/todo.md"}'),
        ToolCall(id="call_b", name="list_dir", arguments='{"path": "src", "depth": 2}'),
    ]
    assert json.loads(calls[0].arguments) == {"path": "notes/todo.md"}
    # the tool calls come after every text delta, then usage, then finish
    assert events[-1] == Finish("tool_calls")
    assert isinstance(events[-2], Usage)
    assert events.index(calls[0]) > max(i for i, e in enumerate(events) if isinstance(e, TextDelta))


def test_usage_reports_cached_tokens(server: ScriptedLLM) -> None:
    server.enqueue(
        {
            "content": "ok",
            "usage": {"prompt_tokens": 1200, "completion_tokens": 7, "cached_tokens": 1024},
        }
    )

    events = list(make_chat(server).stream(USER, None))

    assert [e for e in events if isinstance(e, Usage)] == [
        Usage(prompt_tokens=1200, completion_tokens=7, cached_tokens=1024, total_tokens=1207)
    ]


def test_length_finish_is_reported(server: ScriptedLLM) -> None:
    server.enqueue({"content": "cut", "finish_reason": "length"})

    events = list(make_chat(server).stream(USER, None))

    assert events[-1] == Finish("length")


def test_server_records_what_the_client_sent(server: ScriptedLLM) -> None:
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Read my notes"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path":"notes.md"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "buy milk"},
    ]
    server.enqueue({"content": "You need milk."})

    list(make_chat(server, model="gpt-test").stream(messages, TOOLS))

    (request,) = server.wait_for_requests(1)
    assert request.method == "POST"
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.body["model"] == "gpt-test"
    assert request.body["messages"] == messages
    assert request.body["tools"] == TOOLS
    assert request.body["stream"] is True
    assert request.body["stream_options"] == {"include_usage": True}
    assert request.outcome == "completed"


def test_no_tools_means_no_tools_key(server: ScriptedLLM) -> None:
    list(make_chat(server).stream(USER, []))

    assert "tools" not in server.requests[0].body


def test_rate_limit_then_success_is_retried(server: ScriptedLLM) -> None:
    server.enqueue({"error": {"status": 429, "message": "Rate limit reached"}})
    server.enqueue({"content": "second time lucky"})

    events = list(make_chat(server).stream(USER, None))

    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "second time lucky"
    assert [r.outcome for r in server.wait_for_requests(2)] == ["error", "completed"]


def test_server_error_then_success_is_retried(server: ScriptedLLM) -> None:
    server.enqueue({"error": {"status": 503, "message": "overloaded"}})
    server.enqueue({"error": {"status": 500, "message": "oops"}})
    server.enqueue({"content": "fine"})

    events = list(make_chat(server).stream(USER, None))

    assert events[-1] == Finish("stop")
    assert len(server.requests) == 3


def test_unauthorized_is_not_retried(server: ScriptedLLM) -> None:
    server.enqueue({"error": {"status": 401, "message": "Incorrect API key provided"}})
    server.enqueue({"content": "never sent"})

    with pytest.raises(LLMError) as info:
        list(make_chat(server).stream(USER, None))

    assert info.value.category == "permission"
    assert len(server.requests) == 1
    assert server.script.pending() == 1


def test_break_after_a_yielded_delta_is_not_retried(server: ScriptedLLM) -> None:
    server.enqueue({"content": "partial answer", "chunk_size": 2, "disconnect_after": 3})
    server.enqueue({"content": "must not be used"})

    seen: list[str] = []
    with pytest.raises(LLMError) as info:
        for event in make_chat(server).stream(USER, None):
            if isinstance(event, TextDelta):
                seen.append(event.text)

    assert info.value.category == "stream"
    assert seen == ["pa", "rt"]
    assert len(server.requests) == 1


def test_break_before_any_delta_is_retried(server: ScriptedLLM) -> None:
    server.enqueue({"content": "lost", "disconnect_after": 1})  # only the role chunk got out
    server.enqueue({"content": "whole"})

    events = list(make_chat(server).stream(USER, None))

    assert [e.text for e in events if isinstance(e, TextDelta)] == ["whol", "e"]
    assert len(server.requests) == 2


def test_retry_after_header_is_honoured_within_the_cap(server: ScriptedLLM) -> None:
    server.enqueue({"error": {"status": 429, "message": "slow down", "retry_after": 0.3}})
    server.enqueue({"content": "ok"})

    started = time.monotonic()
    list(make_chat(server, backoff_max=1.0).stream(USER, None))

    assert time.monotonic() - started >= 0.3
    assert len(server.requests) == 2


def test_cancel_mid_stream_closes_the_connection_promptly(server: ScriptedLLM) -> None:
    server.enqueue({"content": "word " * 200, "chunk_size": 5, "chunk_delay": 0.05})
    cancel = threading.Event()
    texts: list[str] = []

    started = time.monotonic()
    with pytest.raises(Cancelled):
        for event in make_chat(server).stream(USER, None, should_cancel=cancel.is_set):
            if isinstance(event, TextDelta):
                texts.append(event.text)
                if len(texts) == 3:
                    cancel.set()
    stopped = time.monotonic() - started

    assert texts == ["word "] * 3
    assert stopped < 1.0
    (request,) = server.wait_for_requests(1, timeout=2.0)
    assert request.outcome == "client_closed"


def test_cancel_before_start_sends_nothing(server: ScriptedLLM) -> None:
    with pytest.raises(Cancelled):
        list(make_chat(server).stream(USER, None, should_cancel=lambda: True))

    assert server.requests == []


def test_cancel_during_backoff_stops_retrying(server: ScriptedLLM) -> None:
    server.enqueue({"error": {"status": 429, "message": "slow down", "retry_after": 5}})
    calls = {"n": 0}

    def should_cancel() -> bool:
        calls["n"] += 1
        return calls["n"] > 2  # false before the request and for the backoff's first look

    started = time.monotonic()
    with pytest.raises(Cancelled):
        list(make_chat(server, backoff_max=5.0).stream(USER, None, should_cancel=should_cancel))

    assert time.monotonic() - started < 1.0
    assert len(server.requests) == 1


def test_from_settings_reads_the_django_settings(settings: pytest.FixtureRequest) -> None:
    settings.OPENAI_API_KEY = KEY
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    settings.RTC_MODEL = "my-model"
    settings.RTC_LLM_TIMEOUT = 12
    settings.RTC_LLM_MAX_ATTEMPTS = 2

    chat = OpenAIChat.from_settings()

    assert (chat.api_key, chat.base_url, chat.model, chat.timeout, chat.max_attempts) == (
        KEY,
        "http://127.0.0.1:9/v1",
        "my-model",
        12.0,
        2,
    )


class _RawSSE:
    """A provider that answers every chat request with a fixed server-sent-event body: a real
    HTTP server for the stream shapes the scripted model does not produce."""

    def __init__(self, body: bytes) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _event(obj: object) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\r\n\r\n"


def test_events_are_read_as_providers_write_them() -> None:
    """CRLF line ends, comments, named events, data split over lines, ``reasoning`` as
    OpenRouter names it, a chunk of another choice, UTF-8 with no charset in the content type:
    read as the SDK would."""
    delta = {"choices": [{"index": 0, "delta": {"content": "Hé✓"}}]}
    split = json.dumps({"choices": [{"index": 0, "delta": {"content": "lo"}}]})
    body = (": keep-alive\r\n\r\n"
            + _event({"choices": [{"index": 0, "delta": {"reasoning": "hmm"}}]})
            + "event: message\r\n" + _event(delta)
            + "data: " + split[:13] + "\r\ndata: " + split[13:] + "\r\n\r\n"
            + _event({"choices": [{"index": 1, "delta": {"content": "other"}}]})
            + _event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            + _event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                                               "total_tokens": 5}})
            + "data: [DONE]\r\n\r\n" + _event({"choices": [{"index": 0,
                                                            "delta": {"content": "late"}}]}))
    with _RawSSE(body.encode()) as url:
        chat = OpenAIChat(api_key=KEY, base_url=url, model="m", timeout=5.0)
        events = list(chat.stream(USER, None))
    # the split data line: "\n"-joined, which JSON reads as whitespace only outside strings
    assert events[0] == ReasoningDelta("hmm")
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hé✓", "lo"]
    usage = next(e for e in events if isinstance(e, Usage))
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (3, 2, 5)
    assert events[-1] == Finish("stop")


def test_an_error_event_mid_stream_fails_the_answer_with_its_message() -> None:
    body = (_event({"choices": [{"index": 0, "delta": {"content": "Hi"}}]})
            + _event({"error": {"message": "upstream overloaded", "type": "server_error"}}))
    with _RawSSE(body.encode()) as url:
        chat = OpenAIChat(api_key=KEY, base_url=url, model="m", timeout=5.0)
        seen: list[object] = []
        with pytest.raises(LLMError) as caught:
            for event in chat.stream(USER, None):
                seen.append(event)
    assert seen == [TextDelta("Hi")]  # what came before is kept; nothing is repeated
    assert "upstream overloaded" in caught.value.raw_error
