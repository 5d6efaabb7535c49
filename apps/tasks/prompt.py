"""What the model reads of goals and todos: the messages sent on a goal's behalf and the
reminders of the prompt's volatile tail (pure functions of their arguments).

The reminders are rebuilt for every request and never stored, so however many rounds a goal
runs, the prompt holds one goal reminder and one todo list, both current.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_MARKS = {"completed": "[x]", "in_progress": "[~]", "pending": "[ ]"}


def goal_kickoff_text(condition: str) -> str:
    """The user message that starts the work on a goal set by the user (``/goal``)."""
    return (f"/goal {condition}\n\nWork towards this goal until it is met. Call completeGoal "
            f"when it is, or cancelGoal if it cannot be met.")


def goal_continue_text(condition: str) -> str:
    """The short user message that starts each further round of an active goal."""
    return f"Continue working towards the goal: {condition}"


def goal_reminder(*, condition: str, rounds: int, max_rounds: int) -> str:
    """The active goal, for the prompt's volatile tail. ``rounds`` turns have completed; this
    request belongs to round ``rounds + 1``."""
    current = min(rounds + 1, max_rounds)
    return (
        "<system-reminder>\n"
        f"Active goal (round {current} of {max_rounds}): {condition}\n"
        "Keep working towards it without waiting for the user: each time you finish, a new "
        "round starts by itself until the goal ends. When the condition is met, call "
        "completeGoal with a short summary of the evidence; if it cannot be met, call "
        "cancelGoal with the reason. Do not declare it met before it is.\n"
        "</system-reminder>"
    )


def todo_reminder(items: Sequence[dict[str, Any]]) -> str:
    """The session's todo list, for the prompt's volatile tail ("" when nothing is left to
    do: an empty list, or every item completed)."""
    if not items or all(i.get("status") == "completed" for i in items):
        return ""
    lines = []
    for n, i in enumerate(items, start=1):
        text = i.get("content", "")
        if i.get("status") == "in_progress" and i.get("active_form"):
            text = f"{text} (now: {i['active_form']})"
        lines.append(f"{n}. {_MARKS.get(i.get('status', ''), '[ ]')} {text}")
    return (
        "<system-reminder>\n"
        "Your todo list ([x] completed, [~] in progress, [ ] pending):\n"
        + "\n".join(lines)
        + "\nKeep it current with todoWrite: mark an item in progress when you start it and "
        "completed as soon as it is done.\n"
        "</system-reminder>"
    )


def todo_summary(items: Sequence[dict[str, Any]]) -> str:
    """The todoWrite result: the counts, and what is being worked on."""
    if not items:
        return "Todo list cleared."
    counts = {s: sum(1 for i in items if i["status"] == s)
              for s in ("completed", "in_progress", "pending")}
    text = (f"Todo list updated: {len(items)} items ({counts['completed']} completed, "
            f"{counts['in_progress']} in progress, {counts['pending']} pending).")
    doing = [i["content"] for i in items if i["status"] == "in_progress"]
    if doing:
        text += " In progress: " + "; ".join(doing) + "."
    elif counts["pending"]:
        text += " Mark the next item in_progress when you start it."
    return text
