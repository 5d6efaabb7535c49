"""The knobs of goals, loops and todos: ``settings.RTCAGENT`` wins, else these defaults.

Kept here, as the memory app keeps its own, while the app is new; ``task_setting`` reads
``rtc_setting`` first, so moving them to ``rtcagent.conf.DEFAULTS`` changes nothing.
"""

from __future__ import annotations

from typing import Any

from rtcagent.conf import rtc_setting

DEFAULTS: dict[str, Any] = {
    # Goals
    "GOAL_DEFAULT_MAX_ROUNDS": 50,  # the original's safety limit
    "GOAL_MAX_ROUNDS": 200,  # the highest max_rounds a client or the agent may ask for
    "GOAL_CONDITION_MAX_CHARS": 4000,
    "GOAL_SWEEP_QUIET": 5.0,  # seconds a completed turn is left to its runner's own hook
    # Loops
    "LOOP_MIN_INTERVAL_SECONDS": 60,
    "LOOP_MAX_INTERVAL_SECONDS": 7 * 24 * 3600,
    "LOOP_DEFAULT_MAX_RUNS": 100,
    "LOOP_MAX_RUNS": 1000,
    "LOOP_MAX_ACTIVE_PER_USER": 20,
    "LOOP_PROMPT_MAX_CHARS": 4000,
    "LOOP_CLAIM_MS": 30_000,  # a tick claimed in Redis by a worker that died is free after this
    "LOOP_TICK_BATCH": 100,  # due loops one scheduler tick looks at
    # Todo list
    "TODO_MAX_ITEMS": 100,
    "TODO_ITEM_MAX_CHARS": 1000,
}


def task_setting(name: str) -> Any:
    """The knob ``name``: ``settings.RTCAGENT`` (or ``rtcagent.conf``) first, else ours."""
    try:
        return rtc_setting(name)
    except KeyError:
        return DEFAULTS[name]
