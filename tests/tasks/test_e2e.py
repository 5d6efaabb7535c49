"""Goals and loops with real turns: ``Worker`` threads (real database, Redis and the scripted
model) run the turns, and scheduler threads call ``scheduler.tick`` as each worker's sweep
does. A goal runs its rounds until exhausted, or until the model calls completeGoal; a loop runs
its ticks across two workers and a restart of both, each tick once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from apps.sessions.models import Message
from apps.tasks import scheduler
from apps.tasks.models import Goal, Loop, LoopRun
from apps.turns.llm import OpenAIChat
from apps.turns.models import Turn
from apps.turns.worker import Worker
from tests.sessions.factories import call, make_session
from tests.tasks.helpers import Threads, until, updates_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fast(settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "GOAL_SWEEP_QUIET": 0,
                         "LOOP_MIN_INTERVAL_SECONDS": 1}


@pytest.fixture
def start(model, threads) -> Iterator[Callable[[int], Threads]]:
    """``start(n)``: n worker processes, as far as goals and loops can tell: each a ``Worker``
    and a scheduler calling ``tick`` (the sweep's step), stopped together."""

    def make(count: int) -> Threads:
        group = threads()
        for _ in range(count):
            worker = Worker(llm_factory=lambda: OpenAIChat(
                api_key="sk-test-key", base_url=model.base_url, model="scripted-model",
                max_attempts=1), lease_ms=5000)
            group.start(worker.run)
            group.stopping_hooks.append(worker.stopping.set)
            group.start(scheduler.tick, every=0.05)
        return group

    yield make


def _turns(session: Any) -> list[str]:
    return list(Turn.objects.filter(session_id=getattr(session, "id", session))
                .order_by("created_at")
                .values_list("status", flat=True))


def test_a_goal_runs_its_rounds_until_exhausted(make_user, model, start) -> None:
    model.add_rule({"last_user_contains": "goal"}, {"content": "Still working on it."})
    session = make_session(make_user())
    start(1)
    goal_id = call("v1.goal.set", session.user, {"session_id": str(session.id),
                                                 "condition": "the report is written",
                                                 "max_rounds": 3})["result"]["goal_id"]
    goal = until(lambda: Goal.objects.filter(pk=goal_id, status="exhausted").first())
    assert goal.rounds == 3
    until(lambda: _turns(session) == ["completed"] * 3)
    texts = [m.content["data"]["text"] for m in Message.objects.filter(
        session=session, role="user").order_by("global_offset")]
    assert texts[0].startswith("/goal the report is written\n")
    assert texts[1:] == ["Continue working towards the goal: the report is written"] * 2
    assert len(model.requests) == 3  # one answer per round, and no fourth round


def test_the_model_completes_its_goal_and_the_rounds_stop(make_user, model, start) -> None:
    model.add_rule({"last_user_contains": "/goal"}, {"content": "First half done."})
    model.add_rule({"last_user_contains": "Continue working"}, {"tool_calls": [
        {"name": "completeGoal", "arguments": {"summary": "both halves are done"}}]})
    model.add_rule({"last_tool_result_contains": "Goal completed"}, {"content": "Done."})
    session = make_session(make_user())
    start(1)
    goal_id = call("v1.goal.set", session.user, {"session_id": str(session.id),
                                                 "condition": "both halves done"}
                   )["result"]["goal_id"]
    goal = until(lambda: Goal.objects.filter(pk=goal_id, status="completed").first())
    assert (goal.rounds, goal.outcome) == (1, "both halves are done")
    until(lambda: _turns(session) == ["completed", "completed"])
    output = Message.objects.get(session=session, content__type="toolcall_output")
    assert output.content["data"]["output"].startswith("Goal completed: both halves done\n")
    assert Message.objects.filter(session=session, role="user").count() == 2


def test_a_loop_runs_each_tick_once_across_two_workers_and_a_restart(make_user, model,
                                                                     start) -> None:
    model.add_rule({"last_user_contains": "how is the deploy"}, {"content": "Green."})
    session = make_session(make_user())
    first = start(2)
    loop_id = call("v1.loop.create", session.user, {
        "session_id": str(session.id), "prompt": "how is the deploy?", "interval_seconds": 1,
        "max_runs": 3})["result"]["loop_id"]
    until(lambda: LoopRun.objects.filter(loop_id=loop_id, status="sent").exists())
    first.stop()  # both workers go away, their Redis claims and all
    start(2)
    loop = until(lambda: Loop.objects.filter(pk=loop_id, status="finished").first())
    until(lambda: _turns(session) == ["completed"] * 3)
    sent = list(LoopRun.objects.filter(loop=loop, status="sent").order_by("tick"))
    assert loop.runs == 3 and len(sent) == 3
    ticks = [r.tick for r in sent]
    assert ticks == sorted(set(ticks))  # never twice for one tick
    assert [(r.due_at - loop.anchor_at).total_seconds() for r in sent] == [
        float(t) for t in ticks]  # at its interval
    messages = Message.objects.filter(session=session, role="user").order_by("global_offset")
    assert [m.client_id for m in messages] == [f"loop:{loop.id}:{t}" for t in ticks]
    assert all(m.turn_id is not None for m in messages)
    assert len(model.requests) == 3


def test_the_models_todo_list_reaches_the_topic(make_user, model, start) -> None:
    todos = [{"content": "Read the logs", "status": "in_progress", "activeForm": "Reading"},
             {"content": "Write the fix", "status": "pending"}]
    model.add_rule({"last_user_contains": "plan it"},
                   {"tool_calls": [{"name": "todoWrite", "arguments": {"todos": todos}}]})
    model.add_rule({"last_tool_result_contains": "Todo list updated"}, {"content": "Planned."})
    user = make_user()
    start(1)
    sent = call("v1.message.send", user, {
        "content_data": {"type": "user_message", "data": {"text": "plan it"}},
        "client_id": "c-1"})
    sid = sent["result"]["session_id"]
    until(lambda: _turns(sid) == ["completed"])
    lists = [u["todo_list"] for u in updates_of(user, "session") if u["id"] == sid]
    assert lists[-1] == [
        {"content": "Read the logs", "status": "in_progress", "active_form": "Reading"},
        {"content": "Write the fix", "status": "pending", "active_form": "Write the fix"}]
    assert lists[0] == []  # the session as created; the list arrived as an Update
