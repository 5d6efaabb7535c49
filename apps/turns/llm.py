"""The LLM port (a stream of small events) and its OpenAI Chat Completions adapter.

The engine depends on ``ChatModel`` and the event dataclasses only; ``OpenAIChat`` is the one
place in the code base that talks to ``openai`` (imported lazily, so importing the port costs
nothing and the engine's tests with in-memory fakes stay fast).

Invariants of ``ChatModel.stream``:

* Events come in this order: any number of ``ReasoningDelta`` / ``TextDelta`` as they arrive;
  then, after the provider's stream ended, every ``ToolCall`` complete and in index order; then
  ``Usage`` when the provider reported it; ``Finish`` is always the last event.
* Failures are raised as ``LLMError`` (see ``apps.turns.llm_errors``), never as provider
  exceptions. A failure after a ``Finish``-less end of stream is a ``stream`` error.
* Retries: only transient failures (``LLMError.retryable``: timeouts, connection errors, 429,
  5xx, broken streams), at most ``max_attempts`` attempts in total, with exponential backoff and
  jitter (a ``Retry-After`` header is honoured up to ``backoff_max``), and only while nothing has
  been yielded yet, so a consumer never sees a repeated delta.
* Cancellation: ``should_cancel`` is polled before the request, between chunks and during
  backoff; when it returns True the HTTP response is closed at once and ``Cancelled`` is raised.
  While the provider sends nothing the read timeout bounds how long a cancel waits.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from apps.turns.llm_errors import LLMError, MissingAPIKey, StreamBroken, classify
from rtcagent.jsonsafety import scrub_nul

if TYPE_CHECKING:
    import openai

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "gpt-4.1-mini"
DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # the JSON text as the model wrote it ("{}" when it wrote nothing)


@dataclass(frozen=True, slots=True)
class Usage:
    """What the provider reports for one call. ``prompt_tokens`` includes the cached (read from
    the prompt cache) and cache-written tokens; ``completion_tokens`` includes reasoning."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    total_tokens: int
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Finish:
    reason: str  # "stop", "tool_calls", "length", "content_filter"


Event = TextDelta | ReasoningDelta | ToolCall | Usage | Finish


def _number(*candidates: Any) -> int:
    """The first candidate that is a non-negative integer (providers send null or omit)."""
    for value in candidates:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return 0


def _extra(obj: Any) -> dict[str, Any]:
    return (getattr(obj, "model_extra", None) or {}) if obj is not None else {}


def usage_from(raw: Any) -> Usage:
    """``Usage`` from an ``openai`` ``CompletionUsage``, under the names providers use.

    Cached (read) tokens: ``prompt_tokens_details.cached_tokens`` (OpenAI), else Anthropic-style
    ``cache_read_input_tokens`` or DeepSeek's ``prompt_cache_hit_tokens``. Cache writes:
    ``prompt_tokens_details.cache_write_tokens`` (OpenAI, OpenRouter), ``cache_creation_tokens``
    or ``cache_creation_input_tokens`` there or at the top (LiteLLM, Qwen and other gateways in
    front of Anthropic-style caching). Reasoning: ``completion_tokens_details.reasoning_tokens``.
    """
    prompt = raw.prompt_tokens_details
    completion = raw.completion_tokens_details
    top, pextra = _extra(raw), _extra(prompt)
    prompt_tokens = _number(raw.prompt_tokens)
    completion_tokens = _number(raw.completion_tokens)
    return Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=_number(
            prompt.cached_tokens if prompt else None,
            top.get("cache_read_input_tokens"), top.get("prompt_cache_hit_tokens"),
        ),
        total_tokens=_number(raw.total_tokens) or prompt_tokens + completion_tokens,
        reasoning_tokens=_number(
            completion.reasoning_tokens if completion else None, top.get("reasoning_tokens")
        ),
        cache_write_tokens=_number(
            getattr(prompt, "cache_write_tokens", None),
            pextra.get("cache_creation_tokens"), pextra.get("cache_creation_input_tokens"),
            top.get("cache_creation_input_tokens"),
        ),
    )


class Cancelled(Exception):
    """``should_cancel`` returned True; the HTTP response was closed."""


class ChatModel(Protocol):
    """The port: stream one model answer for ``messages`` (Chat Completions format)."""

    def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        should_cancel: Callable[[], bool] | None = None,
    ) -> Iterator[Event]: ...


_clients: dict[tuple[str, str | None, float, float], openai.OpenAI] = {}
_clients_lock = threading.Lock()


def shared_client(
    api_key: str, base_url: str | None, timeout: float, connect_timeout: float
) -> openai.OpenAI:
    """One ``openai.OpenAI`` per process and configuration, shared by every ``OpenAIChat``.

    The worker builds an ``OpenAIChat`` per turn and per resume; a client of its own each time
    cost a new SSL context and connection pool (about 21 ms before the first byte, measured in
    docs/performance.md). The client is thread-safe and keeps its connections alive between
    calls, so sharing it also saves the TCP (and TLS) handshake of every call after the first.
    """
    key = (api_key, base_url, timeout, connect_timeout)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            import openai

            client = openai.OpenAI(
                api_key=api_key,
                base_url=base_url,
                timeout=openai.Timeout(timeout, connect=min(timeout, connect_timeout)),
                max_retries=0,  # retries are ours: bounded, and never after a yielded delta
            )
            _clients[key] = client
        return client


class OpenAIChat:
    """``ChatModel`` over any OpenAI-compatible ``/chat/completions`` endpoint."""

    def __init__(
        self,
        *,
        api_key: str,
        model: str = DEFAULT_MODEL,
        base_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = 10.0,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
    ) -> None:
        self.api_key = api_key or ""
        self.model = model
        self.base_url = base_url or None
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_attempts = max(1, max_attempts)
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._client: openai.OpenAI | None = None

    @classmethod
    def from_settings(cls, **overrides: Any) -> OpenAIChat:
        """Build from ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``RTC_MODEL``, ``RTC_LLM_TIMEOUT``
        and ``RTC_LLM_MAX_ATTEMPTS`` in Django settings (keyword ``overrides`` win)."""
        from django.conf import settings

        options: dict[str, Any] = {
            "api_key": getattr(settings, "OPENAI_API_KEY", "") or "",
            "base_url": getattr(settings, "OPENAI_BASE_URL", "") or None,
            "model": getattr(settings, "RTC_MODEL", "") or DEFAULT_MODEL,
            "timeout": float(getattr(settings, "RTC_LLM_TIMEOUT", DEFAULT_TIMEOUT)),
            "max_attempts": int(getattr(settings, "RTC_LLM_MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS)),
        }
        options.update(overrides)
        return cls(**options)

    # -- public -----------------------------------------------------------------------------

    def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        should_cancel: Callable[[], bool] | None = None,
        on_open: Callable[[Callable[[], None] | None], None] | None = None,
    ) -> Iterator[Event]:
        """Stream one answer; see the module docstring for order, retries and cancellation.

        ``on_open`` is told how to abort the response while it is open (a callable another
        thread may call: it shuts the socket down, which wakes the blocked read at once) and
        ``None`` when it closed: a live call's input cuts the answer this way
        (``apps.live.interrupts``) rather than waiting for the next chunk."""
        cancelled = should_cancel or (lambda: False)
        attempt = 0
        while True:
            attempt += 1
            yielded = False
            events = self._attempt(messages, tools, cancelled, on_open)
            try:
                for event in events:
                    yielded = True
                    yield event
                return
            except (Cancelled, LLMError):
                raise
            except Exception as exc:
                error = classify(exc, secrets=[self.api_key])
                if not error.retryable or yielded or attempt >= self.max_attempts:
                    raise error from exc
                delay = self._backoff(attempt, error.retry_after)
                logger.warning(
                    "LLM attempt %d/%d failed (%s), retrying in %.2fs: %s",
                    attempt,
                    self.max_attempts,
                    error.category,
                    delay,
                    error.raw_error,
                )
                self._sleep(delay, cancelled)
            finally:
                events.close()  # a consumer that stops early closes the HTTP response now

    # -- internals --------------------------------------------------------------------------

    def _get_client(self) -> openai.OpenAI:
        if not self.api_key:
            raise classify(MissingAPIKey("no API key configured"))
        if self._client is None:
            self._client = shared_client(self.api_key, self.base_url, self.timeout,
                                         self.connect_timeout)
        return self._client

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
        delay *= 0.5 + random.random() / 2
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_max))
        return delay

    @staticmethod
    def _sleep(delay: float, cancelled: Callable[[], bool]) -> None:
        deadline = time.monotonic() + delay
        while True:
            if cancelled():
                raise Cancelled()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.05))

    def _attempt(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        cancelled: Callable[[], bool],
        on_open: Callable[[Callable[[], None] | None], None] | None = None,
    ) -> Iterator[Event]:
        import openai

        if cancelled():
            raise Cancelled()
        client = self._get_client()
        # The prompt goes in ``extra_body`` (the SDK's documented way to send JSON as is): as
        # ``messages=``/``tools=`` the SDK would first walk every message and tool schema to
        # transform it, about 1.2 ms per request for a 15 KB prompt with 26 tools; ours are
        # plain JSON already. ``messages=[]`` is overridden by it.
        body: dict[str, Any] = {"messages": messages}
        if tools:
            body["tools"] = tools
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [],
            "stream": True,
            "stream_options": {"include_usage": True},
            "extra_body": body,
        }
        # The raw response: the SDK still sends the request, retries its connection and raises
        # its errors for a refused request; the events are read here, as plain JSON, without
        # building the SDK's typed chunk objects (about a third of a worker's CPU per chunk).
        with client.chat.completions.with_streaming_response.create(**kwargs) as response:
            calls: dict[int, dict[str, Any]] = {}
            finish: str | None = None
            usage: Usage | None = None
            try:
                if on_open is not None:
                    on_open(lambda: _abort(response))
                if cancelled():
                    raise Cancelled()
                chunks = _sse_objects(response)
                while True:
                    try:
                        chunk = next(chunks)
                    except StopIteration:
                        break
                    except Exception as exc:
                        if cancelled():  # aborted from another thread: not a broken stream
                            raise Cancelled() from None
                        if isinstance(exc, ValueError):  # a garbled event
                            raise StreamBroken("the answer stream could not be parsed") from exc
                        if isinstance(exc, openai.APIConnectionError) and not isinstance(
                                exc, openai.APITimeoutError):
                            raise StreamBroken("the connection dropped mid-answer") from exc
                        raise
                    if cancelled():
                        raise Cancelled()
                    if isinstance(chunk.get("usage"), dict):
                        usage = usage_from(_typed_usage(chunk["usage"]))
                    deltas, reason = _deltas(chunk, calls)
                    yield from deltas
                    finish = reason or finish
            finally:
                if on_open is not None:
                    on_open(None)
        if finish is None:
            raise StreamBroken("the answer stream ended before the model finished")
        for index in sorted(calls):
            slot = calls[index]
            yield ToolCall(
                id=scrub_nul(slot["id"]) or f"call_{index}",
                name=scrub_nul(slot["name"]),
                arguments=scrub_nul("".join(slot["args"])) or "{}",
            )
        if usage is not None:
            yield usage
        yield Finish(finish)


def _deltas(chunk: dict[str, Any], calls: dict[int, dict[str, Any]]
            ) -> tuple[list[Event], str | None]:
    """The reasoning and text deltas of one streamed chunk (its choice 0) and its finish
    reason; its tool-call fragments are added to ``calls`` (index -> id, name, argument parts).
    NUL cannot be stored (PostgreSQL text and jsonb refuse it): U+FFFD instead."""
    events: list[Event] = []
    finish = None
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            continue
        delta = choice.get("delta") or {}
        # DeepSeek/vLLM call it reasoning_content, OpenRouter and newer vLLM reasoning.
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            events.append(ReasoningDelta(scrub_nul(reasoning)))
        content = delta.get("content")
        if isinstance(content, str) and content:
            events.append(TextDelta(scrub_nul(content)))
        for part in delta.get("tool_calls") or ():
            slot = calls.setdefault(part.get("index") or 0, {"id": "", "name": "", "args": []})
            if part.get("id"):
                slot["id"] = str(part["id"])
            function = part.get("function") or {}
            if function.get("name"):
                slot["name"] = str(function["name"])
            if function.get("arguments"):
                slot["args"].append(str(function["arguments"]))
        if choice.get("finish_reason"):
            finish = str(choice["finish_reason"])
    return events, finish


DRAIN_LINES_MAX = 16  # lines read after [DONE] (``_sse_objects``)


def _sse_objects(response: Any) -> Iterator[dict[str, Any]]:
    """The JSON objects of a streamed Chat Completions response's server-sent events, up to
    ``[DONE]``. An event carrying ``error`` is raised as the SDK raises it (``openai.APIError``);
    one that is not a JSON object is a ``ValueError``. Written here, rather than the SDK's typed
    stream, for speed (the module docstring); the SSE rules followed are the WHATWG ones the
    providers use: ``data:`` lines joined by newlines, a blank line ends an event, comments and
    other fields ignored."""
    import openai

    data: list[str] = []
    lines = response.iter_lines()
    for line in lines:
        if line:
            if line.startswith("data:"):
                data.append(line[6:] if line.startswith("data: ") else line[5:])
            continue
        if not data:
            continue
        text, data = "\n".join(data), []
        if text.startswith("[DONE]"):
            # The response read to its end, as the SDK's own stream does: closed unread, its
            # connection would be dropped rather than kept for the next request, which would
            # then pay a new connection (a TLS handshake with a real provider). A server that
            # goes on after [DONE] has its connection closed after a few lines; one that fails
            # there loses the connection, not the answer, which is complete.
            with contextlib.suppress(Exception):
                for _ in zip(range(DRAIN_LINES_MAX), lines, strict=False):
                    pass
            return
        obj = orjson.loads(text)
        if not isinstance(obj, dict):
            raise ValueError("an event of the answer stream is not a JSON object")
        if obj.get("error"):
            error = obj["error"]
            message = error.get("message") if isinstance(error, dict) else None
            raise openai.APIError(message=str(message or "An error occurred during streaming"),
                                  request=response.http_request, body=error)
        yield obj


def _typed_usage(raw: dict[str, Any]) -> Any:
    """A usage object as the SDK builds it (nested details as attributes, unknown keys as
    extras), for ``usage_from``: once per answer, so its cost does not matter."""
    from openai.types import CompletionUsage

    return CompletionUsage.construct(**raw)


def _abort(response: Any) -> None:
    """Drop an open streaming response from another thread: shut its socket down (a blocked
    ``recv`` returns at once; closing the socket alone would not wake it)."""
    import socket

    http = getattr(response, "http_response", None) or getattr(response, "response", None)
    if http is None or http.is_closed:  # its connection may serve another request by now
        return
    stream = http.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)

