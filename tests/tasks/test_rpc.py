"""``v1.goal.*`` and ``v1.loop.*`` through the RPC registry: replies and Updates checked against
their wire schemas, refusals (bad params, other users' ids) that change nothing, and the goal
and loop Updates of a scenario replayed onto an empty client state equal fresh queries."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import pytest

from apps.gateway import wire
from apps.gateway.models import TopicEvent
from apps.gateway.registry import get_handler
from apps.sessions.models import Message, SessionStatus
from apps.tasks import scheduler
from apps.tasks.models import Goal, Loop
from rtcagent.errors import InvalidRequest, InvalidState, NotFound, RateLimited
from tests.sessions.factories import call, make_session
from tests.tasks.helpers import complete_turn, waiting

pytestmark = pytest.mark.django_db

GOAL_KEYS = {"id", "session_id", "condition", "status", "rounds", "max_rounds", "created_at",
             "updated_at"}
LOOP_KEYS = {"id", "session_id", "prompt", "interval_seconds", "max_runs", "runs", "status",
             "next_run_at", "created_at", "updated_at"}


def rpc(method: str, user: Any, params: dict[str, Any]) -> dict[str, Any]:
    """Call like the gateway and check the reply and each Update it carries."""
    reply = call(method, user, params)
    wire.check(get_handler(method).reply_schema, reply, method)
    for update in reply.get("updates", []):
        wire.check_publication(update, f"{method} update")
    return reply


def _topic(user: Any) -> list[dict[str, Any]]:
    rows = TopicEvent.objects.filter(user=user).order_by("offset")
    for row in rows:
        wire.check_publication(row.data, f"offset {row.offset}")
    return [row.data for row in rows]


def test_goal_set_get_and_cancel(session) -> None:
    user = session.user
    assert rpc("v1.goal.get", user, {"session_id": str(session.id)}) == {"item": None}
    reply = rpc("v1.goal.set", user, {"session_id": str(session.id),
                                      "condition": "the docs build", "max_rounds": 10})
    goal_id = reply["result"]["goal_id"]
    assert [u["items"][0]["entity"] for u in reply["updates"]] == ["goal", "session"]
    assert reply["updates"][1]["items"][1]["entity"] == "message"  # the kickoff message
    item = rpc("v1.goal.get", user, {"session_id": str(session.id)})["item"]
    assert set(item) == GOAL_KEYS
    assert (item["id"], item["condition"], item["status"], item["rounds"],
            item["max_rounds"]) == (goal_id, "the docs build", "active", 0, 10)
    cancelled = rpc("v1.goal.cancel", user, {"session_id": str(session.id)})
    assert cancelled["result"] == {"success": True}
    assert cancelled["updates"][0]["data_list"][0]["status"] == "cancelled"
    again = rpc("v1.goal.cancel", user, {"session_id": str(session.id)})
    assert again == {"result": {"success": True}, "updates": []}
    assert rpc("v1.goal.get", user, {"session_id": str(session.id)})["item"]["status"] == (
        "cancelled")


@pytest.mark.parametrize(("params", "error"), [
    ({"session_id": None, "condition": "x"}, "session_id: required \\(or client_session_id"),
    ({"session_id": "", "condition": "x"}, "session_id: required \\(or client_session_id"),
    ({"session_id": "nope", "condition": "x"}, "session_id: Must be a valid UUID"),
    ({"condition": ""}, "condition: This field may not be blank"),
    ({"condition": "   "}, "condition: required"),
    ({"condition": "x", "max_rounds": 500}, "max_rounds: must be an integer from 1 to 200"),
    ({"condition": "x", "max_rounds": "many"}, "max_rounds: A valid integer is required"),
])
def test_bad_goal_params_are_refused(session, params, error) -> None:
    with pytest.raises(InvalidRequest, match=error):
        call("v1.goal.set", session.user, {"session_id": str(session.id), **params})
    assert not Goal.objects.exists() and not TopicEvent.objects.exists()


def test_a_goal_typed_in_a_new_conversation_creates_its_session(make_user) -> None:
    user = make_user()
    reply = call("v1.goal.set", user, {
        "session_id": "", "client_session_id": "dev-1:c1", "agent_prompt": "Be brief.",
        "work_mode": "auto", "condition": "a haiku is written", "max_rounds": 2},
        device_id="dev-1")
    wire.check(get_handler("v1.goal.set").reply_schema, reply, "v1.goal.set")
    goal = Goal.objects.get(pk=reply["result"]["goal_id"])
    session = goal.session
    assert (session.client_session_id, session.device_id, session.agent_prompt,
            session.work_mode) == ("dev-1:c1", "dev-1", "Be brief.", "auto")
    (kickoff,) = Message.objects.filter(session=session)
    assert kickoff.client_id == f"goal:{goal.id}:0"
    items = [(i["entity"], i["action"]) for u in reply["updates"] for i in u["items"]]
    # the kickoff's turn is created with it (a new session has nothing ahead of it)
    assert items == [("session", "created"), ("message", "created"), ("turn", "created"),
                     ("goal", "created")]
    assert kickoff.turn.status == "pending" and session.status == "active"


def test_a_loop_typed_in_a_new_conversation_sends_its_first_run(make_user) -> None:
    user = make_user()
    reply = call("v1.loop.create", user, {
        "client_session_id": "dev-1:c2", "prompt": "status?", "interval_seconds": 60,
        "max_runs": 2}, device_id="dev-1")
    wire.check(get_handler("v1.loop.create").reply_schema, reply, "v1.loop.create")
    loop = Loop.objects.get(pk=reply["result"]["loop_id"])
    (msg,) = Message.objects.filter(session=loop.session)
    assert msg.client_id == f"loop:{loop.id}:0" and loop.session.device_id == "dev-1"
    assert (loop.runs, loop.next_tick, loop.status) == (1, 1, "active")
    assert list(loop.ticks.values_list("tick", "status", "message_id")) == [(0, "sent", msg.id)]
    assert scheduler.tick(loop.anchor_at) == 0  # tick 0 is done
    once = call("v1.loop.create", user, {"client_session_id": "dev-1:c3", "prompt": "once",
                                         "interval_seconds": 60, "max_runs": 1})
    done = Loop.objects.get(pk=once["result"]["loop_id"])
    assert (done.status, done.next_run_at, done.runs) == ("finished", None, 1)


def test_a_new_conversation_beyond_the_caps_is_refused_with_nothing_written(make_user,
                                                                           settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "MAX_QUEUED_TURNS_PER_USER": 1}
    user = make_user()
    call("v1.message.send", user, {"content_data": {"type": "text", "data": "first"},
                                   "client_id": "c-1"})
    before = TopicEvent.objects.count()
    for method, params in (("v1.goal.set", {"condition": "x"}),
                           ("v1.loop.create", {"prompt": "p", "interval_seconds": 60})):
        with pytest.raises(RateLimited):
            call(method, user, {"client_session_id": "cs-new", **params})
    assert not Goal.objects.exists() and not Loop.objects.exists()
    assert TopicEvent.objects.count() == before and Message.objects.count() == 1


def test_another_users_session_is_not_found(session, make_user) -> None:
    stranger = make_user()
    sid = str(session.id)
    for method, params in (("v1.goal.set", {"session_id": sid, "condition": "x"}),
                           ("v1.goal.get", {"session_id": sid}),
                           ("v1.goal.cancel", {"session_id": sid}),
                           ("v1.loop.create", {"session_id": sid, "prompt": "p",
                                               "interval_seconds": 60}),
                           ("v1.loop.list", {"session_id": sid})):
        with pytest.raises(NotFound, match="session"):
            call(method, stranger, params)
    loop = rpc("v1.loop.create", session.user, {"session_id": sid, "prompt": "p",
                                                "interval_seconds": 60})["result"]["loop_id"]
    with pytest.raises(NotFound, match="loop"):
        call("v1.loop.stop", stranger, {"loop_id": loop})
    assert rpc("v1.loop.list", stranger, {}) == {"items": [], "next_cursor": ""}
    assert Loop.objects.get().status == "active" and not Goal.objects.exists()


def test_loop_create_list_and_stop(session) -> None:
    user = session.user
    other = make_session(user)
    made = [rpc("v1.loop.create", user, {"session_id": str(s.id), "prompt": f"p{n}",
                                         "interval_seconds": 300, "max_runs": 2})
            for n, s in enumerate((session, other, session))]
    ids = [m["result"]["loop_id"] for m in made]
    assert made[0]["updates"][0]["items"][0] == {"entity": "loop", "action": "created",
                                                 "entity_id": ids[0]}
    page = rpc("v1.loop.list", user, {"session_id": str(session.id)})
    assert [i["id"] for i in page["items"]] == [ids[2], ids[0]] and page["next_cursor"] == ""
    assert set(page["items"][0]) == LOOP_KEYS
    first = page["items"][1]
    assert (first["prompt"], first["interval_seconds"], first["max_runs"], first["runs"],
            first["status"]) == ("p0", 300, 2, 0, "active")
    due, created = (datetime.fromisoformat(first[k]) for k in ("next_run_at", "created_at"))
    assert due <= created  # due at once
    half = rpc("v1.loop.list", user, {"limit": 2})
    rest = rpc("v1.loop.list", user, {"limit": 2, "cursor": half["next_cursor"]})
    assert [i["id"] for i in half["items"] + rest["items"]] == ids[::-1]
    stopped = rpc("v1.loop.stop", user, {"loop_id": ids[0]})
    assert stopped["result"] == {"success": True}
    assert stopped["updates"][0]["data_list"][0]["status"] == "stopped"
    assert stopped["updates"][0]["data_list"][0]["next_run_at"] is None
    assert rpc("v1.loop.stop", user, {"loop_id": ids[0]})["updates"] == []


@pytest.mark.parametrize(("params", "error"), [
    ({"prompt": "p"}, "interval_seconds: This field is required"),
    ({"prompt": "p", "interval_seconds": 10}, "interval_seconds: must be an integer from 60"),
    ({"prompt": "", "interval_seconds": 60}, "prompt: This field may not be blank"),
    ({"prompt": "p", "interval_seconds": 60, "max_runs": 0}, "max_runs: must be an integer"),
])
def test_bad_loop_params_are_refused(session, params, error) -> None:
    with pytest.raises(InvalidRequest, match=error):
        call("v1.loop.create", session.user, {"session_id": str(session.id), **params})
    assert not Loop.objects.exists() and not TopicEvent.objects.exists()


def test_closed_sessions_take_no_goal_or_loop(session) -> None:
    session.status = SessionStatus.CLOSED
    session.save()
    with pytest.raises(InvalidState):
        call("v1.goal.set", session.user, {"session_id": str(session.id), "condition": "x"})
    with pytest.raises(InvalidState):
        call("v1.loop.create", session.user, {"session_id": str(session.id), "prompt": "p",
                                              "interval_seconds": 60})
    assert not TopicEvent.objects.exists()


def test_replayed_updates_equal_fresh_queries(session, settings) -> None:
    """A client that applies every goal and loop Update in order ends with what the queries
    answer now."""
    settings.RTCAGENT = {**settings.RTCAGENT, "GOAL_SWEEP_QUIET": 0}
    user, sid = session.user, str(session.id)
    rpc("v1.goal.set", user, {"session_id": sid, "condition": "one", "max_rounds": 2})
    rpc("v1.goal.set", user, {"session_id": sid, "condition": "two", "max_rounds": 2})
    for _ in range(2):
        complete_turn(session, waiting(session).first())
        scheduler.tick()  # the sweep counts the round (no runner hook in this test)
    a = rpc("v1.loop.create", user, {"session_id": sid, "prompt": "a", "interval_seconds": 60,
                                     "max_runs": 1})["result"]["loop_id"]
    rpc("v1.loop.create", user, {"session_id": sid, "prompt": "b", "interval_seconds": 60})
    loop_a = Loop.objects.get(pk=a)
    scheduler.tick(loop_a.anchor_at)
    rpc("v1.loop.stop", user, {"loop_id": str(Loop.objects.get(prompt="b").id)})

    state: dict[str, dict[str, dict[str, Any]]] = {"goal": {}, "loop": {}}
    for update in _topic(user):
        for it, data in zip(update["items"], update["data_list"], strict=True):
            if it["entity"] in state:
                state[it["entity"]][it["entity_id"]] = data
    assert {g["status"] for g in state["goal"].values()} == {"cancelled", "exhausted"}
    latest = rpc("v1.goal.get", user, {"session_id": sid})["item"]
    assert state["goal"][latest["id"]] == latest
    assert latest["rounds"] == 2 and latest["status"] == "exhausted"
    loops = rpc("v1.loop.list", user, {"session_id": sid})["items"]
    assert {i["id"]: i for i in loops} == state["loop"]
    assert {(i["prompt"], i["status"], i["runs"]) for i in loops} == {
        ("a", "finished", 1), ("b", "stopped", 0)}


def test_unknown_ids_are_not_found(session) -> None:
    with pytest.raises(NotFound, match="loop"):
        call("v1.loop.stop", session.user, {"loop_id": str(uuid.uuid4())})
    with pytest.raises(NotFound, match="session"):
        call("v1.goal.get", session.user, {"session_id": str(uuid.uuid4())})
