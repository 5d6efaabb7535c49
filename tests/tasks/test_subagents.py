"""Sub-agent tools and RPCs against the real database, without workers: the limits (depth,
per answer) as ``[Tool Error]``, one child per tool call however often the step runs, the
anchor message, the tree the tools may reach, and ownership in ``v1.session.list`` and
``v1.subagent.stop``. (The turns themselves: ``tests/turns/test_subagents.py``.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from apps.sessions.models import Message, Session
from apps.tasks.models import SubAgent
from apps.turns import server_tools
from apps.turns.engine import Deferred
from apps.turns.models import Turn, TurnStatus
from apps.turns.server_tools import ToolContext
from rtcagent.errors import InvalidRequest, NotFound
from tests.sessions.factories import call, make_message, make_session

pytestmark = pytest.mark.django_db


def _turn(session: Session) -> Turn:
    return Turn.objects.create(session=session, user_id=session.user_id,
                               status=TurnStatus.RUNNING)


def _call_message(turn: Turn, step: int, call_id: str, tool: str = "subAgent") -> Message:
    session = Session.objects.get(pk=turn.session_id)
    return make_message(session, role="assistant", turn=turn,
                        client_id=f"turn:{turn.id}:{step}:call:{call_id}",
                        content={"type": "toolcall_input",
                                 "data": {"id": call_id, "tool_name": tool, "input": "{}"}})


def _start(session: Session, turn: Turn, msg: Message | None, title: str = "Job",
           mode: str = "sync") -> Any:
    ctx = ToolContext(user_id=session.user_id, session_id=str(session.id), turn_id=str(turn.id),
                      message_id=str(msg.id) if msg else None)
    return server_tools.run("subAgent", ctx, {"title": title, "instruction": f"do {title}",
                                              "mode": mode})


def test_a_sync_call_starts_one_child_however_often_its_step_runs(make_user) -> None:
    root = make_session(make_user(), device_id="dev-1", work_mode="auto")
    turn = _turn(root)
    first = _call_message(turn, 0, "c1")
    second = _call_message(turn, 0, "c2")
    one = _start(root, turn, first, "One")
    assert isinstance(one, Deferred)
    assert _start(root, turn, first, "One") == one  # the step again, after a crash
    two = _start(root, turn, second, "Two")
    assert two != one
    children = list(Session.objects.filter(parent_session=root).order_by("title"))
    assert [c.title for c in children] == ["One", "Two"]
    for child in children:
        assert child.root_session_id == root.id and child.user_id == root.user_id
        assert child.sub_agent_parent_message_id == first.id  # the answer's first subAgent call
        assert (child.device_id, child.work_mode) == ("dev-1", "auto")
        (instruction,) = Message.objects.filter(session=child)
        assert instruction.content["data"]["text"] == f"do {child.title}"
        assert instruction.role == "user" and instruction.turn_id is None
    assert SubAgent.objects.count() == 2


def test_an_async_call_answers_at_once(make_user) -> None:
    root = make_session(make_user())
    turn = _turn(root)
    text = _start(root, turn, _call_message(turn, 0, "c1"), "Bg", mode="async")
    child = Session.objects.get(parent_session=root)
    assert text.startswith(f'Sub-agent "Bg" started in the background (sub_session_id: '
                           f"{child.id}).")


def test_limits_are_tool_errors(make_user, settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "SUBAGENT_MAX_DEPTH": 2,
                         "SUBAGENT_MAX_PER_STEP": 2}
    root = make_session(make_user())
    turn = _turn(root)
    _start(root, turn, _call_message(turn, 0, "a"))
    _start(root, turn, _call_message(turn, 0, "b"))
    assert _start(root, turn, _call_message(turn, 0, "c")) == \
        "[Tool Error] at most 2 sub-agents may be started in one answer"
    assert isinstance(_start(root, turn, _call_message(turn, 1, "a")), Deferred)  # next answer
    child = Session.objects.filter(parent_session=root).first()
    child_turn = _turn(child)
    _start(child, child_turn, _call_message(child_turn, 0, "x"))
    grandchild = Session.objects.get(parent_session=child)
    assert grandchild.root_session_id == root.id
    deep_turn = _turn(grandchild)
    assert _start(grandchild, deep_turn, _call_message(deep_turn, 0, "y")) == (
        "[Tool Error] sub-agents may be nested at most 2 levels deep; this session is already "
        "at depth 2. Do the work yourself instead")


def test_the_tools_reach_only_the_callers_own_sub_agents(make_user) -> None:
    user = make_user()
    root, other_root = make_session(user), make_session(user)
    turn = _turn(root)
    _start(root, turn, _call_message(turn, 0, "a"), "Mine")
    mine = Session.objects.get(parent_session=root)
    make_message(mine, role="assistant", content={"type": "markdown", "data": "half done"})
    ctx = ToolContext(user_id=user.id, session_id=str(root.id), turn_id=str(turn.id))
    listed = json.loads(server_tools.run("listSubAgent", ctx, {}))
    assert [(x["sub_session_id"], x["title"], x["status"], x["last_message"])
            for x in listed] == [(str(mine.id), "Mine", "running", "half done")]
    got = json.loads(server_tools.run("getSubAgentMessage", ctx, {"sub_session_id": str(mine.id)}))
    assert (got["sub_session_title"], got["sub_session_status"], got["role"], got["content"]) == (
        "Mine", "running", "assistant", "half done")
    # another tree of the same user, the caller itself, another user's: refused
    stranger = make_session(make_user())
    for target in (other_root.id, root.id, stranger.id):
        out = server_tools.run("stopSubAgent", ctx, {"id": str(target)})
        assert out == f"[Tool Error] no sub-agent {target} below this session"
    outer = ToolContext(user_id=user.id, session_id=str(other_root.id), turn_id="t")
    assert json.loads(server_tools.run("listSubAgent", outer, {})) == []
    assert server_tools.run("stopSubAgent", ctx, {}).startswith(
        "[Tool Error] invalid arguments for stopSubAgent")


def test_session_list_rpc_lists_roots_or_one_sessions_children_for_its_owner_only(
        make_user) -> None:
    user, other = make_user(), make_user()
    root = make_session(user)
    turn = _turn(root)
    _start(root, turn, _call_message(turn, 0, "a"), "Child")
    child = Session.objects.get(parent_session=root)
    assert [s["id"] for s in call("v1.session.list", user)["items"]] == [str(root.id)]
    children = call("v1.session.list", user, {"parent_session_id": str(root.id)})["items"]
    assert [(s["id"], s["parent_server_session_id"], s["root_server_session_id"])
            for s in children] == [(str(child.id), str(root.id), str(root.id))]
    assert call("v1.session.list", user, {"parent_session_id": ""})["items"][0]["id"] == \
        str(root.id)
    with pytest.raises(NotFound):
        call("v1.session.list", other, {"parent_session_id": str(root.id)})
    with pytest.raises(NotFound):
        call("v1.subagent.stop", other, {"session_id": str(child.id)})
    with pytest.raises(InvalidRequest):
        call("v1.subagent.stop", user, {"session_id": str(root.id)})
    assert SubAgent.objects.get(session=child).status == "running"
