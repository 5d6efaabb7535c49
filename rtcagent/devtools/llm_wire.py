"""Chat Completions wire shapes produced by the scripted LLM, as the official API sends them.

Invariants:

* Every streamed chunk has ``"object": "chat.completion.chunk"`` and the same ``id``, ``created``
  and ``model``; the first delta carries ``role: assistant``; every tool-call delta carries an
  ``index``; the first delta of a tool call carries ``id``, ``type: function``, the name and empty
  arguments, later ones only argument fragments.
* The chunk with ``finish_reason`` has an empty delta. When usage is requested every chunk has
  ``"usage": null`` and one final chunk with ``"choices": []`` carries the usage.
* ``finish_reason`` is ``tool_calls`` when the reply has tool calls, else ``stop``, unless the
  reply says otherwise (``"length"``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from rtcagent.devtools.llm_script import message_text

FINGERPRINT = "fp_scripted"


def _pieces(text: str, size: int) -> list[str]:
    if not text:
        return []
    if size <= 0:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]


def _estimate_tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4) if text else 0


def finish_reason(reply: dict[str, Any]) -> str:
    if reply.get("finish_reason"):
        return reply["finish_reason"]
    return "tool_calls" if reply.get("tool_calls") else "stop"


def usage_for(reply: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """The usage object: the reply's numbers, else rough estimates (4 characters a token)."""
    given = reply.get("usage") or {}
    prompt_text = "".join(
        message_text(m) for m in body.get("messages") or [] if isinstance(m, dict)
    )
    output = reply.get("content", "") + "".join(c["args"] for c in reply.get("tool_calls", []))
    reasoning = given.get("reasoning_tokens", _estimate_tokens(reply.get("reasoning", "")))
    prompt = given.get("prompt_tokens", _estimate_tokens(prompt_text))
    completion = given.get("completion_tokens", _estimate_tokens(output) + reasoning)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {
            "cached_tokens": given.get("cached_tokens", 0),
            "audio_tokens": 0,
            **({"cache_write_tokens": given["cache_write_tokens"]}
               if "cache_write_tokens" in given else {}),
        },
        "completion_tokens_details": {
            "reasoning_tokens": reasoning,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def new_completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex[:24]


def completion(reply: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` object."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.get("content")
        if reply.get("content") or not reply.get("tool_calls")
        else None,
        "refusal": None,
        "annotations": [],
    }
    if message["content"] is None and not reply.get("tool_calls"):
        message["content"] = ""
    if reply.get("reasoning"):
        message["reasoning_content"] = reply["reasoning"]
    if reply.get("tool_calls"):
        message["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["args"]},
            }
            for c in reply["tool_calls"]
        ]
    return {
        "id": new_completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "scripted"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason(reply),
            }
        ],
        "usage": usage_for(reply, body),
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
    }


def stream_chunks(
    reply: dict[str, Any], body: dict[str, Any], *, chunk_size: int
) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed answer, in wire order."""
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    base: dict[str, Any] = {
        "id": new_completion_id(),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body.get("model", "scripted"),
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        out = dict(
            base, choices=[{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        )
        if include_usage:
            out["usage"] = None
        return out

    yield chunk({"role": "assistant", "content": "", "refusal": None})
    for piece in _pieces(reply.get("reasoning", ""), chunk_size):
        yield chunk({"reasoning_content": piece})
    for piece in _pieces(reply.get("content", ""), chunk_size):
        yield chunk({"content": piece})
    for index, call in enumerate(reply.get("tool_calls", [])):
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": call["name"], "arguments": ""},
                    }
                ]
            }
        )
        for piece in _pieces(call["args"], chunk_size):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, finish_reason(reply))
    if include_usage:
        yield dict(base, choices=[], usage=usage_for(reply, body))


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event frame."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


def error_body(error: dict[str, Any]) -> dict[str, Any]:
    return {
        "error": {
            "message": error["message"],
            "type": error["type"],
            "param": error.get("param"),
            "code": error.get("code"),
        }
    }
