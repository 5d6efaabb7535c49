"""The pure parts of the prompt pipeline: no Django, no I/O, deterministic.

Everything here is a function of its arguments, so the same conversation always gives the same
prompt, byte for byte: a provider's prefix cache only hits on identical bytes.

* ``validate`` is the one validator every prompt passes before it is sent (it lives in
  ``apps.turns.engine``, which calls it right before ``ChatModel.stream``; compaction calls it
  before its summary calls).
* ``truncate_output`` applies the tool-result budget: head and tail kept, a
  ``[...truncated...]`` line between them, cut between characters (never inside a UTF-8
  sequence: Python strings are sliced by code point) and at a line end when one is near.
* ``tail_start`` picks the recent tail a compaction keeps, in whole blocks (an assistant answer
  together with the results of all its calls), so a kept result never loses its call.
* ``shared_prefix`` measures how much of a request repeats the previous one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from apps.turns.engine import validate, violations

__all__ = ["validate", "violations"]  # the validator, re-exported beside the other pieces

TRUNCATION_MARKER = "[...truncated...]"
HEAD_SHARE, TAIL_SHARE = 0.6, 0.2  # of the budget; the rest is slack for the marker and drift
# Tools whose old outputs microcompact may clear: large, and cheap to produce again.
COMPACTABLE_TOOLS = frozenset({"ls", "read", "write", "grep", "find", "script"})


def placeholder(tool_name: str) -> str:
    """What the model sees instead of a cleared tool output (the call itself stays)."""
    return f"[Old {tool_name} output cleared to save context; call the tool again if needed]"


# --- the tool-result budget -------------------------------------------------------------------


def truncate_output(text: str, budget: int, count: Callable[[str], int]) -> str:
    """``text`` cut to at most ``budget`` tokens (as ``count`` measures them).

    The head keeps about 60 % of the budget and the tail 20 %, with ``[...truncated...]`` on a
    line of its own between them. Texts within the budget come back unchanged; the cheap test
    first: a token is at least one byte, so a text of at most ``budget`` bytes fits."""
    if budget <= 0:
        return TRUNCATION_MARKER
    if len(text) <= budget and len(text.encode("utf-8", "surrogatepass")) <= budget:
        return text
    total = count(text)
    if total <= budget:
        return text
    per_token = len(text) / max(total, 1)
    head = int(budget * HEAD_SHARE * per_token)
    tail = int(budget * TAIL_SHARE * per_token)
    for _ in range(8):  # the estimate is per text; shrink until the count agrees
        cut = _cut(text, head, tail)
        if count(cut) <= budget:
            return cut
        head, tail = int(head * 0.8), int(tail * 0.8)
    return _cut(text, 0, 0)


def _cut(text: str, head: int, tail: int) -> str:
    start = text[:head]
    newline = start.rfind("\n")
    if newline >= head * 0.8:  # end the head at a line end when one is near
        start = start[: newline + 1]
    end = text[len(text) - tail:] if tail else ""
    newline = end.find("\n")
    if 0 <= newline <= tail * 0.2:
        end = end[newline + 1:]
    sep_before = "" if not start or start.endswith("\n") else "\n"
    sep_after = "\n" if end else ""
    return f"{start}{sep_before}{TRUNCATION_MARKER}{sep_after}{end}"


# --- tail retention ---------------------------------------------------------------------------


def tail_start(
    sizes: Sequence[int],
    texts: Sequence[bool],
    *,
    min_tokens: int,
    min_messages: int,
    max_tokens: int,
) -> int:
    """Index of the first block a compaction keeps, walking back from the end.

    Blocks are kept until they hold at least ``min_tokens`` and ``min_messages`` blocks with
    text, or until the next one would pass ``max_tokens``; the last block is always kept.
    Blocks are whole answers (an assistant message with all its tool results), so the tail is
    "extended backwards" by construction: no kept result loses its call."""
    kept_tokens = kept_texts = 0
    start = len(sizes)
    for i in range(len(sizes) - 1, -1, -1):
        if start < len(sizes) and kept_tokens + sizes[i] > max_tokens:
            break
        start = i
        kept_tokens += sizes[i]
        kept_texts += bool(texts[i])
        if kept_tokens >= min_tokens and kept_texts >= min_messages:
            break
    return start


# --- cache accounting -------------------------------------------------------------------------


def fingerprint(value: Any) -> str:
    """A short stable hash of a message or a tool list (the bytes a provider would see)."""
    raw = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(raw, digest_size=12).hexdigest()


def shared_prefix(previous: Sequence[Sequence[Any]], current: Sequence[Sequence[Any]]) -> int:
    """Tokens of ``current`` in the longest run of leading parts equal to ``previous``'s.

    Both are sequences of ``(fingerprint, tokens)``: the tool list first (providers render the
    tools before the messages), then one entry per message."""
    shared = 0
    for before, now in zip(previous, current, strict=False):
        if before[0] != now[0]:
            break
        shared += int(now[1])
    return shared
