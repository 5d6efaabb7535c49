"""Goals and loops in the operator console: listed and searched, statuses read-only, a loop's
ticks inline, and the cancel and stop actions (the owner's widget gets the Updates)."""

from __future__ import annotations

import pytest

from apps.tasks import goals, loops, scheduler
from apps.tasks.models import Goal, Loop
from tests.sessions.factories import make_session
from tests.tasks.helpers import updates_of

pytestmark = pytest.mark.django_db

GOALS, LOOPS = "/admin/tasks/goal/", "/admin/tasks/loop/"


def test_goals_are_listed_searched_and_cancelled(staff, session, make_user) -> None:
    goal = goals.goal_set(user_id=session.user_id, session_id=session.id,
                          condition="ship the release", kickoff=False).goal
    other = make_session(make_user())
    theirs = goals.goal_set(user_id=other.user_id, session_id=other.id, condition="other",
                            kickoff=False).goal
    page = staff.get(f"{GOALS}?q=release").content.decode()
    assert f"{GOALS}{goal.pk}/change/" in page and f"{GOALS}{theirs.pk}/change/" not in page
    assert staff.get(f"{GOALS}{goal.pk}/change/").status_code == 200
    assert staff.get(f"{GOALS}add/").status_code == 403
    reply = staff.post(GOALS, {"action": "cancel_goals", "_selected_action": [goal.pk]},
                       follow=True)
    assert "Cancelled 1 goal(s)." in reply.content.decode()
    goal.refresh_from_db()
    assert (goal.status, goal.outcome) == ("cancelled", "cancelled by an operator")
    assert updates_of(session.user, "goal")[-1]["status"] == "cancelled"
    assert Goal.objects.get(pk=theirs.pk).status == "active"


def test_the_status_cannot_be_edited(staff, session) -> None:
    goal = goals.goal_set(user_id=session.user_id, session_id=session.id, condition="c",
                          kickoff=False).goal
    staff.post(f"{GOALS}{goal.pk}/change/", {"status": "completed", "condition": "other"})
    goal.refresh_from_db()
    assert (goal.status, goal.condition) == ("active", "c")


def test_loops_show_their_ticks_and_are_stopped(staff, session, settings) -> None:
    loop = loops.loop_create(user_id=session.user_id, session_id=session.id,
                             prompt="check the queue", interval_seconds=60).loop
    scheduler.tick(loop.anchor_at)
    page = staff.get(f"{LOOPS}?q=queue").content.decode()
    assert f"{LOOPS}{loop.pk}/change/" in page
    detail = staff.get(f"{LOOPS}{loop.pk}/change/").content.decode()
    assert "Ticks (the latest 50)" in detail and "Sent" in detail, detail[-3000:]
    reply = staff.post(LOOPS, {"action": "stop_loops", "_selected_action": [loop.pk]},
                       follow=True)
    assert "Stopped 1 loop(s)." in reply.content.decode()
    loop.refresh_from_db()
    assert (loop.status, loop.stop_reason) == ("stopped", "stopped by an operator")
    assert updates_of(session.user, "loop")[-1]["status"] == "stopped"
    reply = staff.post(LOOPS, {"action": "stop_loops", "_selected_action": [loop.pk]},
                       follow=True)
    assert "Stopped 0 loop(s)." in reply.content.decode()
    assert Loop.objects.get(pk=loop.pk).runs == 1
