"""Goals: set (and replaced), the kickoff message, a round per completed turn, the next round's
message without piling up, exhausted at the limit, and every refusal changing nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest

from apps.gateway.models import TopicEvent
from apps.sessions.models import Message, SessionStatus
from apps.tasks import goals, hooks, scheduler
from apps.tasks.models import Goal
from apps.turns.models import Turn, TurnStatus
from rtcagent.errors import InvalidRequest, InvalidState, NotFound, RateLimited
from tests.sessions.factories import make_message, make_session
from tests.tasks.helpers import complete_turn, updates_of, waiting

pytestmark = pytest.mark.django_db


def _texts(session) -> list[tuple[str, str]]:
    rows = Message.objects.filter(session=session).order_by("global_offset")
    return [(m.client_id, m.content["data"]["text"] if isinstance(m.content["data"], dict)
             else m.content["data"]) for m in rows]


def test_a_goal_set_by_the_user_starts_the_work_with_one_message(session) -> None:
    change = goals.goal_set(user_id=session.user_id, session_id=session.id,
                            condition="  all tests pass  ")
    goal = change.goal
    assert (goal.condition, goal.status, goal.rounds, goal.max_rounds) == (
        "all tests pass", "active", 0, 50)
    (kickoff,) = Message.objects.filter(session=session)
    assert kickoff.client_id == f"goal:{goal.id}:0" and kickoff.role == "user"
    assert kickoff.content["data"]["text"].startswith("/goal all tests pass\n")
    assert kickoff.content["data"]["origin"] == {"kind": "goal", "id": str(goal.id), "round": 0}
    assert [u["items"][0]["entity"] for u in change.updates] == ["goal", "session"]
    assert change.updates[0]["items"][0]["action"] == "created"
    assert updates_of(session.user, "goal")[0]["condition"] == "all tests pass"


def test_no_kickoff_while_a_message_waits_for_its_turn(session) -> None:
    make_message(session, client_id="c-1", content={"type": "user_message",
                                                    "data": {"text": "first"}})
    goals.goal_set(user_id=session.user_id, session_id=session.id, condition="done")
    assert _texts(session) == [("c-1", "first")]


def test_a_new_goal_replaces_the_active_one(session) -> None:
    first = goals.goal_set(user_id=session.user_id, session_id=session.id, condition="one",
                           kickoff=False).goal
    change = goals.goal_set(user_id=session.user_id, session_id=session.id, condition="two",
                            max_rounds=3, kickoff=False)
    first.refresh_from_db()
    assert (first.status, first.outcome) == ("cancelled", "replaced by a new goal")
    assert change.replaced.pk == first.pk
    assert list(Goal.objects.filter(session=session, status="active")) == [change.goal]
    assert [(u["action"], u["condition"], u["status"]) for u in updates_of(session.user, "goal")
            ] == [("created", "one", "active"), ("updated", "one", "cancelled"),
                  ("created", "two", "active")]


@pytest.mark.parametrize(("condition", "max_rounds", "error"), [
    ("", None, "condition: required"),
    ("   ", None, "condition: required"),
    ("x" * 4001, None, "condition: at most 4000 characters"),
    ("ok", 0, "max_rounds: must be an integer from 1 to 200"),
    ("ok", 201, "max_rounds: must be an integer from 1 to 200"),
    ("ok", True, "max_rounds: must be an integer from 1 to 200"),
])
def test_bad_goals_are_refused_and_nothing_is_written(session, condition, max_rounds,
                                                      error) -> None:
    with pytest.raises(InvalidRequest, match=error):
        goals.goal_set(user_id=session.user_id, session_id=session.id, condition=condition,
                       max_rounds=max_rounds)
    assert not Goal.objects.exists() and not Message.objects.exists()
    assert not TopicEvent.objects.exists()


def test_a_goal_on_a_closed_or_foreign_session_is_refused(session, make_user) -> None:
    with pytest.raises(NotFound, match="session"):
        goals.goal_set(user_id=make_user().id, session_id=session.id, condition="x")
    session.status = SessionStatus.CLOSED
    session.save()
    with pytest.raises(InvalidState, match="closed"):
        goals.goal_set(user_id=session.user_id, session_id=session.id, condition="x")
    assert not Goal.objects.exists() and not TopicEvent.objects.exists()


def test_a_kickoff_beyond_the_users_caps_writes_nothing(session, settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "MAX_QUEUED_TURNS_PER_USER": 1}
    elsewhere = make_session(session.user)
    make_message(elsewhere, client_id="c-1", content={"type": "text", "data": "queued"})
    with pytest.raises(RateLimited):
        goals.goal_set(user_id=session.user_id, session_id=session.id, condition="b")
    assert not Goal.objects.exists() and not TopicEvent.objects.exists()
    assert not Message.objects.filter(session=session).exists()


def test_each_completed_turn_is_a_round_and_starts_the_next_once(session) -> None:
    goal = goals.goal_set(user_id=session.user_id, session_id=session.id, condition="green",
                          max_rounds=5).goal
    kickoff = Message.objects.get(session=session)
    turn = complete_turn(session, kickoff)
    hooks.after_turn(turn)
    hooks.after_turn(turn)  # the hook and the sweep may both come: counted once
    goal.refresh_from_db()
    assert (goal.rounds, goal.status, goal.last_turn_id) == (1, "active", turn.id)
    assert _texts(session)[1] == (f"goal:{goal.id}:1",
                                  "Continue working towards the goal: green")
    assert Message.objects.filter(session=session).count() == 2
    assert [(u["action"], u["rounds"]) for u in updates_of(session.user, "goal")] == [
        ("created", 0), ("updated", 1)]


def test_a_round_never_piles_a_message_behind_one_that_waits(session) -> None:
    goal = goals.goal_set(user_id=session.user_id, session_id=session.id, condition="c",
                          kickoff=False).goal
    turn = complete_turn(session)
    make_message(session, client_id="u-1", content={"type": "text", "data": "meanwhile"})
    hooks.after_turn(turn)
    goal.refresh_from_db()
    assert goal.rounds == 1
    assert _texts(session) == [("u-1", "meanwhile")]  # that message's turn is the next round


def test_the_goal_is_exhausted_at_its_round_limit(session) -> None:
    goal = goals.goal_set(user_id=session.user_id, session_id=session.id, condition="c",
                          max_rounds=3).goal
    for _ in range(3):
        hooks.after_turn(complete_turn(session, waiting(session).get()))
    goal.refresh_from_db()
    assert (goal.status, goal.rounds, goal.outcome) == ("exhausted", 3, "not met after 3 rounds")
    assert goal.ended_at is not None
    assert not waiting(session).exists()
    assert Message.objects.filter(session=session).count() == 3  # kickoff, rounds 2 and 3
    hooks.after_turn(complete_turn(session))  # an exhausted goal counts nothing more
    goal.refresh_from_db()
    assert goal.rounds == 3
    assert [u["status"] for u in updates_of(session.user, "goal")][-1] == "exhausted"


def test_turns_that_did_not_complete_or_came_before_the_goal_are_not_rounds(session) -> None:
    early = complete_turn(session)
    Turn.objects.filter(pk=early.pk).update(completed_at=early.completed_at - timedelta(hours=1))
    early.refresh_from_db()
    goal = goals.goal_set(user_id=session.user_id, session_id=session.id, condition="c",
                          kickoff=False).goal
    failed = complete_turn(session)
    Turn.objects.filter(pk=failed.pk).update(status=TurnStatus.CANCELLED)
    failed.refresh_from_db()
    for turn in (early, failed):
        hooks.after_turn(turn)
    goal.refresh_from_db()
    assert goal.rounds == 0 and not Message.objects.exists()


def test_an_ended_goal_starts_no_round(session) -> None:
    goals.goal_set(user_id=session.user_id, session_id=session.id, condition="c", kickoff=False)
    done = goals.goal_end(user_id=session.user_id, session_id=session.id, to="completed",
                          outcome="all green")
    assert (done.goal.status, done.goal.outcome) == ("completed", "all green")
    hooks.after_turn(complete_turn(session))
    assert done.goal.__class__.objects.get(pk=done.goal.pk).rounds == 0
    assert not Message.objects.exists()
    again = goals.goal_end(user_id=session.user_id, session_id=session.id, to="cancelled")
    assert again.updates == [] and again.goal.status == "completed"  # idempotent


def test_a_round_beyond_the_caps_leaves_the_goal_waiting(session, settings) -> None:
    goal = goals.goal_set(user_id=session.user_id, session_id=session.id, condition="c",
                          kickoff=False).goal
    settings.RTCAGENT = {**settings.RTCAGENT, "MAX_TURNS_PER_HOUR": 1}
    hooks.after_turn(complete_turn(session))
    goal.refresh_from_db()
    assert (goal.rounds, goal.status) == (1, "active")
    assert not Message.objects.exists()


def test_the_sweep_counts_a_round_whose_hook_never_ran(session, settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "GOAL_SWEEP_QUIET": 0}
    goal = goals.goal_set(user_id=session.user_id, session_id=session.id, condition="c",
                          kickoff=False).goal
    turn = complete_turn(session)
    assert scheduler.goals_sweep() == 1  # the worker died before calling after_turn
    assert scheduler.goals_sweep() == 0
    hooks.after_turn(turn)  # ... or it comes late: nothing more
    goal.refresh_from_db()
    assert goal.rounds == 1
    assert Message.objects.filter(session=session).count() == 1


def test_the_sweep_leaves_fresh_and_running_turns_to_their_runner(session, settings) -> None:
    goals.goal_set(user_id=session.user_id, session_id=session.id, condition="c", kickoff=False)
    complete_turn(session)
    assert scheduler.goals_sweep() == 0  # within GOAL_SWEEP_QUIET of its completion
    settings.RTCAGENT = {**settings.RTCAGENT, "GOAL_SWEEP_QUIET": 0}
    Turn.objects.create(session=session, user_id=session.user_id, status=TurnStatus.RUNNING)
    assert scheduler.goals_sweep() == 0  # the session is busy: its runner will call the hook
