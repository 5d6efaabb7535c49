"""The goal, loop and todo tools as the model calls them (``server_tools.run``): registered
beside the others, their texts, and bad arguments or states answered with ``[Tool Error]``
without changing anything."""

from __future__ import annotations

import json

import pytest

from apps.gateway.models import TopicEvent
from apps.sessions.models import Message, Session
from apps.tasks.models import Goal, Loop
from apps.turns import server_tools
from tests.sessions.factories import make_session
from tests.tasks.helpers import updates_of

pytestmark = pytest.mark.django_db

TASK_TOOLS = ["cancelGoal", "completeGoal", "goal", "listLoop", "loop", "stopLoop", "todoWrite"]


def test_the_tools_are_registered_with_stable_schemas() -> None:
    names = server_tools.names()
    assert set(TASK_TOOLS) <= set(names) and names == sorted(names)
    assert json.dumps(server_tools.schemas()) == json.dumps(server_tools.schemas())
    params = {n: server_tools.get(n).parameters for n in TASK_TOOLS}
    assert params["goal"]["required"] == ["condition"]
    assert params["loop"]["required"] == ["prompt", "interval_seconds"]
    assert params["stopLoop"]["required"] == ["loop_id"]
    item = params["todoWrite"]["properties"]["todos"]["items"]
    assert item["properties"]["status"]["enum"] == ["pending", "in_progress", "completed"]
    assert all(server_tools.get(n).approval == "auto" for n in TASK_TOOLS)


def test_the_agent_sets_a_goal_that_goes_on_in_its_turn(session, ctx) -> None:
    text = server_tools.run("goal", ctx(session), {"condition": "the build is green",
                                                   "max_rounds": 5})
    assert text.startswith("Goal set (at most 5 rounds): the build is green\n")
    goal = Goal.objects.get(session=session)
    assert (goal.status, goal.max_rounds) == ("active", 5)
    assert not Message.objects.exists()  # no kickoff: the agent is already at work
    replaced = server_tools.run("goal", ctx(session), {"condition": "deploy"})
    assert replaced.endswith("The previous goal was cancelled: the build is green")


def test_complete_and_cancel_end_the_goal(session, ctx) -> None:
    server_tools.run("goal", ctx(session), {"condition": "green"})
    done = server_tools.run("completeGoal", ctx(session), {"summary": "42 tests pass"})
    assert done.startswith("Goal completed: green\n")
    goal = Goal.objects.get(session=session)
    assert (goal.status, goal.outcome) == ("completed", "42 tests pass")
    server_tools.run("goal", ctx(session), {"condition": "deploy"})
    assert server_tools.run("cancelGoal", ctx(session), {"reason": "no access"}).startswith(
        "Goal cancelled: deploy\n")
    assert Goal.objects.get(condition="deploy").outcome == "no access"


def test_ending_a_goal_that_is_not_there_is_a_tool_error(session, ctx) -> None:
    for name in ("completeGoal", "cancelGoal"):
        assert server_tools.run(name, ctx(session), {}) == (
            "[Tool Error] there is no active goal in this session")
    assert not TopicEvent.objects.exists()


@pytest.mark.parametrize(("args", "error"), [
    ({}, "[Tool Error] invalid arguments for goal: arguments: 'condition' is a required"),
    ({"condition": "   "}, "[Tool Error] condition: required"),
    ({"condition": "x", "max_rounds": 0}, "[Tool Error] invalid arguments for goal: max_rounds"),
    ({"condition": "x", "why": 1}, "[Tool Error] invalid arguments for goal: arguments: "
                                   "Additional properties"),
])
def test_bad_goal_arguments_change_nothing(session, ctx, args, error) -> None:
    assert server_tools.run("goal", ctx(session), args).startswith(error)
    assert not Goal.objects.exists() and not TopicEvent.objects.exists()


def test_the_agent_creates_lists_and_stops_loops(session, ctx, settings) -> None:
    text = server_tools.run("loop", ctx(session), {"prompt": "check the deploy",
                                                   "interval_seconds": 600, "max_runs": 3})
    loop = Loop.objects.get(session=session)
    assert text.startswith(f"Loop {loop.id} created: the prompt is sent into this session "
                           "every 600 seconds, at most 3 times; the first run is at ")
    assert loop.next_run_at > loop.anchor_at  # the agent just did the work: not at once
    listed = json.loads(server_tools.run("listLoop", ctx(session), {}))
    assert listed == [{"loop_id": str(loop.id), "prompt": "check the deploy",
                       "interval_seconds": 600, "runs": 0, "max_runs": 3, "status": "active",
                       "next_run_at": listed[0]["next_run_at"]}]
    assert server_tools.run("stopLoop", ctx(session), {"loop_id": str(loop.id)}) == (
        f"Loop {loop.id} stopped after 0 runs.")
    assert server_tools.run("stopLoop", ctx(session), {"loop_id": str(loop.id)}) == (
        f"Loop {loop.id} had already ended (stopped); nothing to stop.")


def test_loop_refusals_are_tool_errors(session, ctx, make_user) -> None:
    assert server_tools.run("loop", ctx(session), {"prompt": "p", "interval_seconds": 5}) == (
        "[Tool Error] interval_seconds: must be an integer from 60 to 604800")
    other = make_session(make_user())
    theirs = Loop.objects.create(session=other, user=other.user, prompt="p",
                                 interval_seconds=60, max_runs=1, anchor_at=other.created_at)
    assert server_tools.run("stopLoop", ctx(session), {"loop_id": str(theirs.id)}) == (
        f"[Tool Error] loop {theirs.id} not found")
    sibling = make_session(session.user)
    mine = Loop.objects.create(session=sibling, user=session.user, prompt="p",
                               interval_seconds=60, max_runs=1, anchor_at=sibling.created_at)
    assert server_tools.run("stopLoop", ctx(session), {"loop_id": str(mine.id)}) == (
        f"[Tool Error] loop {mine.id} belongs to another session")
    assert set(Loop.objects.values_list("status", flat=True)) == {"active"}


def test_todo_write_stores_the_list_and_publishes_the_session(session, ctx) -> None:
    todos = [{"content": "Read the code", "status": "completed", "active_form": "Reading"},
             {"content": "Fix the bug", "status": "in_progress", "activeForm": "Fixing the bug"},
             {"content": "Run the tests", "status": "pending"}]
    text = server_tools.run("todoWrite", ctx(session), {"todos": todos})
    assert text == ("Todo list updated: 3 items (1 completed, 1 in progress, 1 pending). "
                    "In progress: Fix the bug.")
    stored = Session.objects.get(pk=session.pk).todo_list
    assert stored == [
        {"content": "Read the code", "status": "completed", "active_form": "Reading"},
        {"content": "Fix the bug", "status": "in_progress", "active_form": "Fixing the bug"},
        {"content": "Run the tests", "status": "pending", "active_form": "Run the tests"}]
    (update,) = updates_of(session.user, "session")
    assert update["action"] == "updated" and update["todo_list"] == stored
    server_tools.run("todoWrite", ctx(session), {"todos": todos})  # the same list: no Update
    assert len(updates_of(session.user, "session")) == 1
    assert server_tools.run("todoWrite", ctx(session), {"todos": []}) == "Todo list cleared."
    assert Session.objects.get(pk=session.pk).todo_list == []


@pytest.mark.parametrize(("todos", "error"), [
    ([{"content": "x", "status": "done"}], "invalid arguments for todoWrite: todos[0].status"),
    ([{"status": "pending"}], "invalid arguments for todoWrite: todos[0]: 'content'"),
    ([{"content": "  ", "status": "pending"}], "todos[0].content: required"),
    # (jsonschema quotes the value first; the registry cuts the message at 200 characters)
    ([{"content": "x" * 1001, "status": "pending"}], "for todoWrite: todos[0].content: 'xxx"),
    ([{"content": "x", "status": "pending"}] * 101, "for todoWrite: todos: [{'content'"),
    ("not a list", "todos: 'not a list' is not of type 'array'"),
])
def test_bad_todo_lists_change_nothing(session, ctx, todos, error) -> None:
    session.todo_list = [{"content": "keep", "status": "pending", "active_form": "keep"}]
    session.save()
    text = server_tools.run("todoWrite", ctx(session), {"todos": todos})
    assert text.startswith("[Tool Error]") and error in text
    assert Session.objects.get(pk=session.pk).todo_list == session.todo_list
    assert not TopicEvent.objects.exists()


def test_tools_on_another_users_session_find_nothing(session, ctx, make_user) -> None:
    stranger = ctx(session).__class__(user_id=make_user().id, session_id=str(session.id),
                                      turn_id="t")
    assert server_tools.run("todoWrite", stranger, {"todos": []}).startswith(
        "[Tool Error] session ")
    assert server_tools.run("goal", stranger, {"condition": "x"}).endswith("not found")
    assert not Goal.objects.exists()
