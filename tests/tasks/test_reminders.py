"""``prompt_reminders``: the active goal and the todo list for the volatile tail of a request,
rebuilt each time (one goal reminder however many rounds ran), never stored."""

from __future__ import annotations

import pytest

from apps.sessions.models import Message
from apps.tasks import goals, hooks
from tests.tasks.helpers import complete_turn, waiting

pytestmark = pytest.mark.django_db


def test_no_goal_and_no_todos_means_no_reminder(session) -> None:
    assert hooks.prompt_reminders(session.id) == []
    session.todo_list = [{"content": "a", "status": "completed", "active_form": "a"}]
    session.save()
    assert hooks.prompt_reminders(session.id) == []  # all done: nothing to remind


def test_the_goal_reminder_follows_the_rounds_and_never_piles_up(session) -> None:
    goals.goal_set(user_id=session.user_id, session_id=session.id, condition="tests pass",
                   max_rounds=4, kickoff=False)
    (first,) = hooks.prompt_reminders(session.id)
    assert first.startswith("<system-reminder>\nActive goal (round 1 of 4): tests pass\n")
    assert "completeGoal" in first and "cancelGoal" in first
    assert first.endswith("</system-reminder>")
    for _ in range(2):
        hooks.after_turn(complete_turn(session, waiting(session).first()))
    (third,) = hooks.prompt_reminders(session.id)
    assert "Active goal (round 3 of 4): tests pass" in third
    stored = " ".join(str(m.content) for m in Message.objects.filter(session=session))
    assert "system-reminder" not in stored  # the rounds' messages stay short
    goals.goal_end(user_id=session.user_id, session_id=session.id, to="completed")
    assert hooks.prompt_reminders(session.id) == []


def test_the_todo_reminder_lists_the_items_with_their_state(session) -> None:
    session.todo_list = [
        {"content": "Read", "status": "completed", "active_form": "Reading"},
        {"content": "Fix", "status": "in_progress", "active_form": "Fixing"},
        {"content": "Test", "status": "pending", "active_form": "Testing"}]
    session.save()
    goals.goal_set(user_id=session.user_id, session_id=session.id, condition="c",
                   kickoff=False)
    goal, todos = hooks.prompt_reminders(session.id)
    assert goal.startswith("<system-reminder>\nActive goal")
    assert todos == (
        "<system-reminder>\n"
        "Your todo list ([x] completed, [~] in progress, [ ] pending):\n"
        "1. [x] Read\n2. [~] Fix (now: Fixing)\n3. [ ] Test\n"
        "Keep it current with todoWrite: mark an item in progress when you start it and "
        "completed as soon as it is done.\n"
        "</system-reminder>")


def test_reminders_of_a_missing_session_are_empty() -> None:
    assert hooks.prompt_reminders("4b1c3f8e-0000-4000-8000-000000000000") == []
    assert hooks.prompt_reminders("not-a-uuid") == []  # logged, never raised into the turn
