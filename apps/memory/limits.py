"""The memory system's knobs: ``settings.RTCAGENT`` wins, else these defaults.

They are kept here rather than in ``rtcagent.conf.DEFAULTS`` while the memory app is new;
``memory_setting`` reads ``rtc_setting`` first, so moving them there changes nothing.
"""

from __future__ import annotations

from typing import Any

from rtcagent.conf import rtc_setting

DEFAULTS: dict[str, Any] = {
    # User memory
    "MEMORY_USER_MAX": 1000,  # per user; then the least important, oldest one gives way
    "MEMORY_USER_MAX_CHARS": 4000,  # one memory's content (about 1,000 tokens)
    "MEMORY_RECALL_LIMIT": 5,  # user memories found by search and injected each turn
    "MEMORY_PINNED_MAX_TOKENS": 8000,  # critical and high memories in the stable prefix
    # Session memory
    "MEMORY_SESSION_MAX_ENTRIES": 20,  # per session; the oldest is evicted
    "MEMORY_SESSION_MAX_TOKENS": 12_000,  # per session; the oldest are evicted
    "MEMORY_SESSION_ENTRY_MAX_TOKENS": 2000,  # one entry is cut here
    "MEMORY_SESSION_MAX_CHARS": 8000,  # what the agent may send in one saveSessionMemory
    "MEMORY_SESSION_INJECT": 5,  # latest entries injected each turn ...
    "MEMORY_SESSION_INJECT_TOKENS": 5000,  # ... within this many tokens
    # Background extraction (apps.memory.extraction)
    "MEMORY_EXTRACT_INIT_TOKENS": 10_000,  # no extraction while the context is smaller
    "MEMORY_EXTRACT_GROWTH_TOKENS": 5000,  # new conversation since the last extraction
    "MEMORY_EXTRACT_MIN_TOOL_CALLS": 3,  # ... with this many tool calls, or at a breakpoint
    "MEMORY_EXTRACT_TRANSCRIPT_TOKENS": 24_000,  # newest part of the conversation sent
    "MEMORY_EXTRACT_LEASE_MS": 120_000,  # a job whose runner vanished is queued again after
    "MEMORY_EXTRACT_RETRY_SECONDS": 300.0,  # after a failed call, triggers wait this long
}


def memory_setting(name: str) -> Any:
    """The knob ``name``: ``settings.RTCAGENT`` (or ``rtcagent.conf``) first, else ours."""
    try:
        return rtc_setting(name)
    except KeyError:
        return DEFAULTS[name]
