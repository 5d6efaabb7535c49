"""Each failure the model can produce, provoked for real against the scripted server (or a closed
port), comes out of OpenAIChat.stream as the right LLMError."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from apps.turns.llm import OpenAIChat
from apps.turns.llm_errors import CATEGORIES, LLMError, StreamBroken, classify
from rtcagent.devtools.scripted_llm import ScriptedLLM

KEY = "sk-test-0123456789abcdef"
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def server() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as llm:
        yield llm


def make_chat(base_url: str, **options: object) -> OpenAIChat:
    defaults: dict[str, object] = {
        "api_key": KEY,
        "base_url": base_url,
        "model": "scripted-model",
        "timeout": 5.0,
        "backoff_base": 0.01,
        "backoff_max": 0.05,
    }
    defaults.update(options)
    return OpenAIChat(**defaults)  # type: ignore[arg-type]


def failure(chat: OpenAIChat) -> LLMError:
    with pytest.raises(LLMError) as info:
        list(chat.stream(USER, None))
    error = info.value
    assert error.category in CATEGORIES
    assert KEY not in error.raw_error
    assert KEY not in error.message
    return error


def test_unauthorized_is_a_permission_error(server: ScriptedLLM) -> None:
    server.enqueue(
        {
            "error": {
                "status": 401,
                "code": "invalid_api_key",
                "message": f"Incorrect API key provided: {KEY}.",
            }
        }
    )

    error = failure(make_chat(server.base_url))

    assert (error.category, error.retryable, error.status) == ("permission", False, 401)
    assert "OPENAI_API_KEY" in error.message
    assert "invalid_api_key" in error.raw_error
    assert "[redacted]" in error.raw_error
    assert len(server.requests) == 1


def test_forbidden_is_a_permission_error(server: ScriptedLLM) -> None:
    server.enqueue({"error": {"status": 403, "message": "Project does not have access"}})

    error = failure(make_chat(server.base_url))

    assert (error.category, error.retryable) == ("permission", False)


def test_rate_limit_exhausting_the_attempts_is_a_retryable_api_error(server: ScriptedLLM) -> None:
    for _ in range(3):
        server.enqueue({"error": {"status": 429, "message": "Rate limit reached"}})
    server.enqueue({"content": "not reached"})

    error = failure(make_chat(server.base_url, max_attempts=3))

    assert (error.category, error.retryable, error.status) == ("api", True, 429)
    assert error.title == "Rate limited"
    assert len(server.requests) == 3


def test_exhausted_quota_is_not_retried(server: ScriptedLLM) -> None:
    server.enqueue(
        {
            "error": {
                "status": 429,
                "code": "insufficient_quota",
                "message": "You exceeded your current quota",
            }
        }
    )

    error = failure(make_chat(server.base_url))

    assert (error.category, error.retryable) == ("api", False)
    assert len(server.requests) == 1


def test_server_error_is_a_retryable_api_error(server: ScriptedLLM) -> None:
    server.enqueue({"error": {"status": 502, "message": "bad gateway"}})

    error = failure(make_chat(server.base_url, max_attempts=1))

    assert (error.category, error.retryable, error.status) == ("api", True, 502)


def test_context_too_long_is_a_context_error(server: ScriptedLLM) -> None:
    server.enqueue(
        {
            "error": {
                "status": 400,
                "code": "context_length_exceeded",
                "message": "This model's maximum context length is 128000 tokens.",
            }
        }
    )

    error = failure(make_chat(server.base_url))

    assert (error.category, error.retryable) == ("context", False)
    assert "new session" in error.message
    assert len(server.requests) == 1


def test_context_message_without_code_is_a_context_error(server: ScriptedLLM) -> None:
    server.enqueue({"error": {"status": 400, "message": "prompt exceeds maximum context length"}})

    assert failure(make_chat(server.base_url)).category == "context"


def test_other_bad_request_is_a_system_error(server: ScriptedLLM) -> None:
    server.enqueue({"error": {"status": 400, "message": "Invalid schema for function 'x'"}})

    error = failure(make_chat(server.base_url))

    assert (error.category, error.retryable) == ("system", False)


def test_connection_refused_is_a_retryable_network_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # the port is closed now: nothing listens there

    error = failure(make_chat(f"http://127.0.0.1:{port}/v1"))

    assert (error.category, error.retryable) == ("network", True)
    assert "refused" in error.message
    assert "OPENAI_BASE_URL" in error.message


def test_malformed_stream_is_a_retryable_stream_error(server: ScriptedLLM) -> None:
    server.enqueue({"content": "hello there", "malformed": True})

    error = failure(make_chat(server.base_url, max_attempts=1))

    assert (error.category, error.retryable) == ("stream", True)


def test_disconnect_mid_stream_is_a_retryable_stream_error(server: ScriptedLLM) -> None:
    server.enqueue({"content": "hello there", "disconnect_after": 2})

    error = failure(make_chat(server.base_url))

    assert (error.category, error.retryable) == ("stream", True)
    assert len(server.requests) == 1  # a delta was already out: no retry


def test_hang_with_a_short_timeout_is_a_retryable_timeout(server: ScriptedLLM) -> None:
    server.enqueue({"hang": 5})

    error = failure(make_chat(server.base_url, timeout=0.3, max_attempts=1))

    assert (error.category, error.retryable) == ("timeout", True)
    assert server.requests[0].body["messages"] == USER


def test_no_api_key_says_how_to_configure(server: ScriptedLLM, settings: object) -> None:
    settings.OPENAI_API_KEY = ""  # type: ignore[attr-defined]
    settings.OPENAI_BASE_URL = server.base_url  # type: ignore[attr-defined]

    error = failure(OpenAIChat.from_settings())

    assert (error.category, error.retryable) == ("api", False)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RTC_MODEL"):
        assert name in error.message
    assert server.requests == []


def test_unknown_exception_is_a_system_error() -> None:
    error = classify(RuntimeError(f"boom with Bearer {KEY}"), secrets=[KEY])

    assert (error.category, error.retryable) == ("system", False)
    assert KEY not in error.raw_error
    assert "boom" in error.raw_error


def test_classify_keeps_an_llm_error_and_knows_plain_exceptions() -> None:
    original = LLMError("tool", "Tool failed", "The tool failed. Try again.")

    assert classify(original) is original
    assert classify(TimeoutError()).category == "timeout"
    assert classify(ConnectionRefusedError()).category == "network"
    assert classify(StreamBroken("cut")).category == "stream"
    assert original.as_dict() == {
        "category": "tool",
        "title": "Tool failed",
        "message": "The tool failed. Try again.",
        "retryable": False,
    }
