"""What went wrong talking to the model, in words a user can act on.

``classify(exc)`` turns any exception raised while calling the model into an ``LLMError`` with a
``category`` (api, context, network, permission, stream, system, timeout, tool), a short ``title``,
a user-facing ``message`` that ends with what to do, ``retryable`` and ``raw_error`` for logs.

Invariants:

* Framework-free and ``openai``-free: provider exceptions are recognised by their class names and
  attributes (``status_code``, ``code``, ``body``, ``response.headers``), so this module imports
  neither Django nor ``openai`` (``apps.turns.llm`` stays the only importer of ``openai``).
* ``retryable`` is True only for transient failures: 429 (except an exhausted quota), 5xx,
  408/409, network, timeout and broken streams.
* Neither ``raw_error`` nor ``message`` contains an API key: the secrets passed to ``classify``
  are replaced, and anything shaped like a bearer token or an ``sk-`` key is masked as well.
* ``classify`` of an ``LLMError`` returns it unchanged.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterable
from typing import Any

CATEGORIES = ("api", "context", "network", "permission", "stream", "system", "timeout", "tool")

CONFIGURE_HINT = (
    "Set OPENAI_API_KEY (and OPENAI_BASE_URL for an OpenAI-compatible server, RTC_MODEL for the "
    "model name) in the server's environment or .env file, then restart the server."
)

_KEY_SHAPES = re.compile(r"(sk-[A-Za-z0-9_\-]{6,}|(?i:bearer)\s+[A-Za-z0-9._~+/=\-]{6,})")
_CONTEXT_WORDS = (
    "maximum context length",
    "context length",
    "context window",
    "too many tokens",
    "prompt is too long",
)


class LLMError(Exception):
    """A classified model failure; ``str()`` is the user-facing message."""

    def __init__(
        self,
        category: str,
        title: str,
        message: str,
        *,
        retryable: bool = False,
        raw_error: str = "",
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        if category not in CATEGORIES:
            raise ValueError(f"unknown LLM error category {category!r}")
        super().__init__(message)
        self.category = category
        self.title = title
        self.message = message
        self.retryable = retryable
        self.raw_error = raw_error
        self.status = status
        self.retry_after = retry_after

    def as_dict(self) -> dict[str, Any]:
        """The user-facing part, safe to send to a client (no ``raw_error``)."""
        return {
            "category": self.category,
            "title": self.title,
            "message": self.message,
            "retryable": self.retryable,
        }

    def __repr__(self) -> str:
        return f"LLMError({self.category!r}, {self.title!r}, retryable={self.retryable})"


class MissingAPIKey(Exception):
    """Raised by the adapter when no API key is configured."""


class StreamBroken(Exception):
    """The answer stream ended early or could not be parsed."""


def _scrub(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    return _KEY_SHAPES.sub("[redacted]", text)


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _raw(exc: BaseException) -> str:
    parts = []
    for item in _chain(exc):
        text = f"{type(item).__name__}: {item}"
        body = getattr(item, "body", None)
        if body is not None and not isinstance(item, LLMError):
            try:
                text += " " + json.dumps(body, default=str)
            except (TypeError, ValueError):
                text += f" {body!r}"
        parts.append(text)
    return " <- ".join(parts)


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    value = headers.get("retry-after") if headers is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _is_timeout(exc: BaseException) -> bool:
    names = _names(exc)
    return bool(names & {"APITimeoutError", "TimeoutException"}) or isinstance(
        exc, TimeoutError | socket.timeout
    )


def _status_error(exc: BaseException, status: int, raw: str) -> LLMError:
    code = str(getattr(exc, "code", None) or "")
    detail = str(getattr(exc, "message", None) or exc)
    retry_after = _retry_after(exc)
    if status in (401, 403):
        return LLMError(
            "permission",
            "Access denied",
            f"The model provider refused the credentials ({status}): {detail} "
            "Check that OPENAI_API_KEY is valid and allowed to use RTC_MODEL.",
            raw_error=raw,
            status=status,
        )
    if status == 429 and code == "insufficient_quota":
        return LLMError(
            "api",
            "Quota exhausted",
            "The API key has no quota left. Add credit or use another key (OPENAI_API_KEY).",
            raw_error=raw,
            status=status,
        )
    if status == 429:
        return LLMError(
            "api",
            "Rate limited",
            "The model provider is rate limiting requests. Wait a moment and try again.",
            retryable=True,
            raw_error=raw,
            status=status,
            retry_after=retry_after,
        )
    if status >= 500:
        return LLMError(
            "api",
            "Provider error",
            f"The model provider failed ({status}). Try again in a moment.",
            retryable=True,
            raw_error=raw,
            status=status,
            retry_after=retry_after,
        )
    if code == "context_length_exceeded" or any(w in detail.lower() for w in _CONTEXT_WORDS):
        return LLMError(
            "context",
            "Conversation too long",
            "The conversation no longer fits in the model's context window. Start a new "
            "session, or remove large attachments or tool results, and try again.",
            raw_error=raw,
            status=status,
        )
    if status == 404:
        return LLMError(
            "api",
            "Model not found",
            f"The model provider does not know this model or endpoint: {detail} "
            "Check RTC_MODEL and OPENAI_BASE_URL.",
            raw_error=raw,
            status=status,
        )
    if status in (408, 409):
        return LLMError(
            "api",
            "Provider busy",
            "The model provider could not take the request. Try again.",
            retryable=True,
            raw_error=raw,
            status=status,
            retry_after=retry_after,
        )
    return _system(raw, status=status)


def _system(raw: str, *, status: int | None = None) -> LLMError:
    return LLMError(
        "system",
        "Unexpected error",
        "Something unexpected went wrong while asking the model. Try again; if it keeps "
        "happening, report it with the time it occurred.",
        raw_error=raw,
        status=status,
    )


def _network(exc: BaseException, raw: str) -> LLMError:
    chain = _chain(exc)
    if any(isinstance(e, socket.gaierror) for e in chain) or any(
        w in raw.lower()
        for w in (
            "name or service not known",
            "nodename nor servname",
            "temporary failure in name resolution",
            "getaddrinfo",
        )
    ):
        what = "the model server's host name could not be resolved"
    elif any(isinstance(e, ConnectionRefusedError) for e in chain) or "refused" in raw.lower():
        what = "the connection to the model server was refused"
    else:
        what = "the model server could not be reached"
    return LLMError(
        "network",
        "Network error",
        f"Network problem: {what}. Check the network and OPENAI_BASE_URL, then try again.",
        retryable=True,
        raw_error=raw,
    )


def classify(exc: BaseException, *, secrets: Iterable[str] = ()) -> LLMError:
    """Map ``exc`` (from the adapter or the provider client) to an ``LLMError``."""
    if isinstance(exc, LLMError):
        return exc
    secrets = list(secrets)
    error = _classify(exc, secrets)
    # Provider details are quoted in some messages, and providers echo keys back in 401s.
    error.message = _scrub(error.message, secrets)
    error.args = (error.message,)
    return error


def _classify(exc: BaseException, secrets: list[str]) -> LLMError:
    raw = _scrub(_raw(exc), secrets)
    names = _names(exc)
    text = str(exc)

    if (
        isinstance(exc, MissingAPIKey)
        or "Missing credentials" in text
        or ("api_key" in text and "must be set" in text)
    ):
        return LLMError(
            "api",
            "No API key configured",
            f"No API key is configured for the model provider. {CONFIGURE_HINT}",
            raw_error=raw,
        )
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and status >= 400:
        return _status_error(exc, status, raw)
    if _is_timeout(exc):
        return LLMError(
            "timeout",
            "Timed out",
            "The model did not answer in time. Try again; if it keeps happening, the provider "
            "may be overloaded or the timeout (RTC_LLM_TIMEOUT) too short.",
            retryable=True,
            raw_error=raw,
        )
    if isinstance(exc, StreamBroken | json.JSONDecodeError) or "RemoteProtocolError" in names:
        return LLMError(
            "stream",
            "Answer interrupted",
            "The model's answer was cut off or garbled in transit. Try again.",
            retryable=True,
            raw_error=raw,
        )
    if names & {"APIConnectionError", "ConnectError", "NetworkError"} or isinstance(
        exc, ConnectionError | socket.gaierror
    ):
        return _network(exc, raw)
    if "APIError" in names:
        # An error event inside an otherwise healthy stream: the provider gave up mid-answer.
        return LLMError(
            "stream",
            "Answer interrupted",
            f"The model provider reported an error mid-answer: {_scrub(text, secrets)} Try again.",
            retryable=True,
            raw_error=raw,
        )
    return _system(raw)
