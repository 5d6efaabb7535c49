"""Sub-agents end to end (issue 12): real Daphne, worker processes, the scripted model over HTTP
and the official centrifuge-python client as the browser.

Sync sub-agents of one answer run in parallel on different workers and their answers reach the
parent as the calls' results; stopping a child or a whole tree resumes the parent; a worker
killed while children run loses nothing and repeats nothing; an async child's result arrives
as a message; bad arguments are ``[Tool Error]``; another user can neither list nor stop them;
a child's browser tools reach the same browser, one RTC at a time."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from centrifuge import ReplyError

from tests.turns.stack import Browser

pytestmark = [pytest.mark.django_db(transaction=True)]


def _sub(title: str, instruction: str, mode: str = "sync", cid: str | None = None
         ) -> dict[str, Any]:
    call: dict[str, Any] = {"name": "subAgent",
                            "arguments": {"title": title, "instruction": instruction,
                                          "mode": mode}}
    if cid:
        call["id"] = cid
    return call


def _slow(text: str, seconds: float) -> dict[str, Any]:
    """A reply streamed one character at a time over about ``seconds``."""
    return {"content": text, "chunk_size": 1, "chunk_delay": seconds / len(text)}


@sync_to_async
def _db(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


def _children(sid: str) -> list[Any]:
    from apps.sessions.models import Session

    return list(Session.objects.filter(parent_session_id=sid).order_by("title"))


def _turns(sid: Any) -> list[Any]:
    from apps.turns.models import Turn

    return list(Turn.objects.filter(session_id=sid).order_by("created_at"))


def _outputs(sid: str) -> list[dict[str, Any]]:
    from apps.sessions.models import Message

    return [m.content["data"] for m in Message.objects.filter(
        session_id=sid, content__type="toolcall_output").order_by("global_offset")]


def _sub_rows(**filters: Any) -> list[Any]:
    from apps.tasks.models import SubAgent

    return list(SubAgent.objects.filter(**filters).order_by("title"))


async def test_three_sync_sub_agents_run_in_parallel_and_their_answers_reach_the_parent(
        gateway, model, make_workers, make_user) -> None:
    model.add_rule({"last_user_contains": "three cities"}, {"content": "Splitting it.",
                   "tool_calls": [_sub("Alpha city", "TASK-A: describe Alpha", cid="c_a"),
                                  _sub("Beta city", "TASK-B: describe Beta", cid="c_b"),
                                  _sub("Gamma city", "TASK-C: describe Gamma", cid="c_c")]})
    for key, name in (("TASK-A", "Alpha"), ("TASK-B", "Beta"), ("TASK-C", "Gamma")):
        model.add_rule({"last_user_contains": key}, _slow(f"{name} is lovely.", 2.5))
    model.add_rule({"last_tool_result_contains": "Gamma is lovely"},
                   {"content": "All three cities are lovely."})
    make_workers(3)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("describe three cities"))["result"]["session_id"]
        await tab.turn_status(sid, "completed", within=60)
        assert tab.messages(sid, "markdown")[-1]["content"]["data"] == \
            "All three cities are lovely."
        children = await _db(_children, sid)
        assert [c.title for c in children] == ["Alpha city", "Beta city", "Gamma city"]
        # lineage: on the rows and in the Updates the browser got
        call_msgs = [m for m in tab.messages(sid, "toolcall_input")]
        first_call = call_msgs[0]["id"]
        for child in children:
            assert str(child.parent_session_id) == sid and str(child.root_session_id) == sid
            assert str(child.sub_agent_parent_message_id) == first_call
            seen = next(s for s in tab.all("session") if s["id"] == str(child.id))
            assert seen["parent_server_session_id"] == sid
            assert seen["root_server_session_id"] == sid
            assert seen["sub_agent_parent_message_id"] == first_call
            assert seen["status"] == "idle"
        # the widget's queries: children of a session, and roots without them
        listed = await tab.rpc("v1.session.list", {"parent_session_id": sid})
        assert sorted(s["title"] for s in listed["items"]) == [c.title for c in children]
        roots = await tab.rpc("v1.session.list", {})
        assert [s["id"] for s in roots["items"]] == [sid]

    # each child's answer is its call's result, in call order, each once
    outputs = await _db(_outputs, sid)
    assert [o["id"] for o in outputs] == ["c_a", "c_b", "c_c"]
    for o, child, name in zip(outputs, children, ("Alpha", "Beta", "Gamma"), strict=True):
        assert o["output"] == (f'Sub-agent "{child.title}" (sub_session_id: {child.id}) '
                               f"completed. Its final answer:\n\n{name} is lovely.")
    final = next(r for r in model.requests
                 if any(m["role"] == "tool" for m in r.body["messages"])
                 and r.body["messages"][1]["content"] == "describe three cities")
    tools = [m for m in final.body["messages"] if m["role"] == "tool"]
    assert [t["tool_call_id"] for t in tools] == ["c_a", "c_b", "c_c"]

    # parallel: the parent took about as long as the slowest child, not the sum
    parent_turn = (await _db(_turns, sid))[0]
    child_turns = [(await _db(_turns, c.id))[0] for c in children]
    assert all(t.status == "completed" for t in child_turns)
    durations = [(t.completed_at - t.started_at).total_seconds() for t in child_turns]
    span = (max(t.completed_at for t in child_turns)
            - min(t.started_at for t in child_turns)).total_seconds()
    # The children ran at the same time: each started before any ended, and together they
    # took about the slowest one's time. (The parent's own wall time, its two model calls and
    # the wake-ups on top, is not compared: on a loaded machine it measured the machine.)
    assert span < 0.7 * sum(durations), (span, durations)
    assert max(t.started_at for t in child_turns) < min(t.completed_at for t in child_turns)
    assert parent_turn.created_at < min(t.started_at for t in child_turns)
    assert parent_turn.completed_at > max(t.completed_at for t in child_turns)
    rows = await _db(_sub_rows, parent_session_id=sid)
    assert [(r.status, r.mode, r.depth) for r in rows] == [("completed", "sync", 1)] * 3


async def test_stop_a_child_then_a_whole_tree_and_the_parent_resumes(
        gateway, model, make_workers, make_user) -> None:
    model.add_rule({"last_user_contains": "two slow jobs"}, {"tool_calls": [
        _sub("Slow one", "TASK-SLOW: take your time", cid="c_1"),
        _sub("Manager", "TASK-MANAGE: delegate", cid="c_2")]})
    model.add_rule({"last_user_contains": "TASK-SLOW"}, _slow("x" * 60, 60))
    model.add_rule({"last_user_contains": "TASK-MANAGE"},
                   {"tool_calls": [_sub("Worker", "TASK-WORK: grind")]})
    model.add_rule({"last_user_contains": "TASK-WORK"}, _slow("y" * 60, 60))
    model.add_rule({"last_tool_result_contains": "was stopped"},
                   {"content": "Both jobs were stopped."})
    make_workers(3)
    user = await sync_to_async(make_user)()
    other = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab, Browser(gateway, other) as intruder:
        sid = (await tab.send("run two slow jobs"))["result"]["session_id"]
        await tab.until(lambda: len([s for s in tab.all("session")
                                     if s["root_server_session_id"] == sid]) == 3, within=30)
        sessions = {s["title"]: s["id"] for s in tab.all("session")}
        slow, manager, worker = sessions["Slow one"], sessions["Manager"], sessions["Worker"]
        await tab.turn_status(worker, "running", within=20)

        # another user can neither list nor stop them
        for method, params in (("v1.subagent.stop", {"session_id": slow}),
                               ("v1.session.list", {"parent_session_id": sid}),
                               ("v1.session.get", {"session_id": slow})):
            with pytest.raises(ReplyError) as err:
                await intruder.rpc(method, params)
            assert "not_found" in str(err.value)

        # one child: stopped, the parent still waits on the other
        stopped = await tab.rpc("v1.subagent.stop", {"session_id": slow})
        assert stopped["result"] == {"success": True, "stopped": [slow]}
        await tab.turn_status(slow, "cancelled")
        await tab.until(lambda: next(s for s in tab.all("session")
                                     if s["id"] == slow)["status"] == "closed")
        await asyncio.sleep(1)
        assert [t["status"] for t in tab.turns(sid)][-1] == "interrupted"

        # the rest of the tree: the leaf first, then its parent; then the root turn resumes
        stopped = await tab.rpc("v1.subagent.stop", {"session_id": manager})
        assert stopped["result"]["stopped"] == [worker, manager]
        await tab.turn_status(sid, "completed", within=30)
        assert tab.messages(sid, "markdown")[-1]["content"]["data"] == "Both jobs were stopped."
        for s in (slow, manager, worker):
            assert next(x for x in tab.all("session") if x["id"] == s)["status"] == "closed"
        await tab.turn_status(worker, "cancelled")  # its worker cancels the stream it was in

    rows = {r.title: r for r in await _db(_sub_rows, user_id=user.id)}
    assert {t: r.status for t, r in rows.items()} == {
        "Slow one": "stopped", "Manager": "stopped", "Worker": "stopped"}
    assert rows["Worker"].ended_at <= rows["Manager"].ended_at
    outputs = await _db(_outputs, sid)
    assert [o["id"] for o in outputs] == ["c_1", "c_2"]
    assert all("was stopped before it finished (stopped by the user)" in o["output"]
               for o in outputs)
    assert [t.status for t in await _db(_turns, worker)] == ["cancelled"]


async def test_stopping_the_root_turn_stops_the_sub_agents_it_waits_on(
        gateway, model, make_workers, make_user) -> None:
    model.add_rule({"last_user_contains": "long research"},
                   {"tool_calls": [_sub("Researcher", "TASK-LONG: research")]})
    model.add_rule({"last_user_contains": "TASK-LONG"},
                   {"tool_calls": [_sub("Assistant", "TASK-DEEP: dig")]})
    model.add_rule({"last_user_contains": "TASK-DEEP"}, _slow("z" * 60, 60))
    make_workers(2)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("do long research"))["result"]["session_id"]
        deep = await tab.until(lambda: next((s["id"] for s in tab.all("session")
                                             if s["title"] == "Assistant"), None), within=30)
        await tab.turn_status(deep, "running", within=20)
        await tab.rpc("v1.turn.stop", {"session_id": sid})
        await tab.turn_status(sid, "cancelled")
        await tab.turn_status(deep, "cancelled", within=20)
    rows = await _db(_sub_rows, user_id=user.id)
    assert [(r.title, r.status) for r in rows] == [("Assistant", "stopped"),
                                                    ("Researcher", "stopped")]


async def test_a_worker_killed_while_children_run_loses_and_repeats_nothing(
        gateway, model, make_workers, make_user) -> None:
    model.add_rule({"last_user_contains": "two reports"}, {"tool_calls": [
        _sub("Report one", "TASK-R1: write", cid="c_1"),
        _sub("Report two", "TASK-R2: write", cid="c_2")]})
    model.add_rule({"last_user_contains": "TASK-R1"}, _slow("Report one is done.", 0.5))
    model.add_rule({"last_user_contains": "TASK-R2"}, _slow("Report two is done.", 8))
    model.add_rule({"last_tool_result_contains": "Report two is done"},
                   {"content": "Both reports are done."})
    workers = make_workers(2)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("write two reports"))["result"]["session_id"]
        def one_done_one_streaming() -> bool:
            kids = {s["title"]: s["id"] for s in tab.all("session")
                    if s["parent_server_session_id"] == sid}
            return len(kids) == 2 and any(
                t["status"] == "completed" for t in tab.turns(kids["Report one"])) and any(
                t["status"] == "running" for t in tab.turns(kids["Report two"]))

        await tab.until(one_done_one_streaming, within=30)
        await asyncio.sleep(0.5)  # report two streams
        # Every worker dies (whichever runs report two: a process runs several turns at once)
        workers.kill()
        make_workers(1)
        await tab.turn_status(sid, "completed", within=60)
        assert [m["content"]["data"] for m in tab.messages(sid, "markdown")] == [
            "Both reports are done."]
    assert [t.status for t in await _db(_turns, sid)] == ["completed"]
    for child in await _db(_children, sid):
        assert [t.status for t in await _db(_turns, child.id)] == ["completed"]
    outputs = await _db(_outputs, sid)
    assert [o["id"] for o in outputs] == ["c_1", "c_2"]
    assert "Report one is done." in outputs[0]["output"]
    assert "Report two is done." in outputs[1]["output"]
    rows = await _db(_sub_rows, parent_session_id=sid)
    assert [r.status for r in rows] == ["completed", "completed"]
    asked = [r for r in model.requests
             if "TASK-R" in str(r.body["messages"][-1].get("content", ""))]
    assert len(asked) == 3  # the killed child's answer was asked again, the finished one's once
    finals = [r for r in model.requests
              if r.body["messages"][-1].get("content", "").endswith("Report two is done.")]
    assert len(finals) == 1  # the parent was resumed once with both answers


async def test_an_async_child_reports_back_with_a_message(
        gateway, pool, model, make_user) -> None:
    model.add_rule({"last_user_contains": "in the background"}, {"tool_calls": [
        _sub("Background job", "TASK-BG: count the files", mode="async")]})
    model.add_rule({"last_tool_result_contains": "started in the background"},
                   {"content": "I started a background job."})
    model.add_rule({"last_user_contains": "TASK-BG"}, _slow("There are 42 files.", 1))
    model.add_rule({"last_user_contains": "There are 42 files."},
                   {"content": "The background job found 42 files."})
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("count files in the background"))["result"]["session_id"]
        await tab.until(lambda: len([t for t in tab.turns(sid)
                                     if t["status"] == "completed"]) == 2, within=40)
        answers = [m["content"]["data"] for m in tab.messages(sid, "markdown")]
        assert answers == ["I started a background job.", "The background job found 42 files."]
        users = tab.messages(sid, "user_message")
        assert len(users) == 2
        note = users[1]["content"]["data"]
        assert note["origin"]["kind"] == "subagent_result"
        assert note["text"].endswith("completed. Its final answer:\n\nThere are 42 files.")
    (output,) = await _db(_outputs, sid)
    (child,) = await _db(_children, sid)
    assert output["output"].startswith(f'Sub-agent "Background job" started in the background '
                                       f"(sub_session_id: {child.id})")


async def test_bad_arguments_are_tool_errors(gateway, pool, model, make_user) -> None:
    model.add_rule({"last_user_contains": "bad calls"}, {"tool_calls": [
        {"id": "c1", "name": "subAgent", "arguments": {"title": "No instruction"}},
        {"id": "c2", "name": "subAgent",
         "arguments": {"title": "T", "instruction": "I", "mode": "later"}},
        {"id": "c3", "name": "subAgent", "arguments": {"title": "  ", "instruction": "I"}},
        {"id": "c4", "name": "stopSubAgent", "arguments": {"sub_session_id": str(uuid.uuid4())}},
        {"id": "c5", "name": "getSubAgentMessage", "arguments": {}},
        {"id": "c6", "name": "listSubAgent", "arguments": {}}]})
    model.add_rule({"last_tool_result_contains": "[Tool Error]"}, {"content": "Noted."})
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("make bad calls"))["result"]["session_id"]
        await tab.turn_status(sid, "completed", within=30)
    out = {o["id"]: o["output"] for o in await _db(_outputs, sid)}
    assert out["c1"].startswith("[Tool Error] invalid arguments for subAgent: ")
    assert "'instruction' is a required property" in out["c1"]
    assert out["c2"].startswith("[Tool Error] invalid arguments for subAgent: mode:")
    assert out["c3"] == "[Tool Error] title and instruction must not be blank"
    assert out["c4"].startswith("[Tool Error] no sub-agent ")
    assert out["c5"].startswith("[Tool Error] invalid arguments for getSubAgentMessage")
    assert out["c6"] == "[]"
    assert await _db(_children, sid) == []


async def test_childrens_browser_tools_reach_the_same_browser_one_at_a_time(
        gateway, model, make_workers, make_user) -> None:
    model.add_rule({"last_user_contains": "read both files"}, {"tool_calls": [
        _sub("Reader A", "TASK-RA: read /a.md"), _sub("Reader B", "TASK-RB: read /b.md")]})
    model.add_rule({"last_user_contains": "TASK-RA"},
                   {"tool_calls": [{"name": "read", "arguments": {"path": "/a.md"}}]})
    model.add_rule({"last_user_contains": "TASK-RB"},
                   {"tool_calls": [{"name": "read", "arguments": {"path": "/b.md"}}]})
    model.add_rule({"last_tool_result_contains": "1\tcontent of"}, {"content": "Read it."})
    model.add_rule({"last_tool_result_contains": "Read it."}, {"content": "Both read."})
    make_workers(2)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("read both files"))["result"]["session_id"]
        root = await tab.until(lambda: next((s for s in tab.all("session") if s["id"] == sid),
                                            None))
        seen: list[str] = []
        for _ in range(2):
            rtc = await tab.until(lambda: next((r for r in tab.all("rtc")
                                                if r["status"] == "pending"
                                                and r["id"] not in seen), None), within=30)
            await asyncio.sleep(1.0)  # the other child had time to ask too: it must not have
            open_rtcs = [r for r in tab.all("rtc") if r["status"] not in
                         ("completed", "failed", "timeout", "rejected")]
            assert [r["id"] for r in open_rtcs] == [rtc["id"]]
            session = next(s for s in tab.all("session") if s["id"] == rtc["session_id"])
            assert session["parent_server_session_id"] == sid
            assert session["device_id"] == root["device_id"]
            seen.append(rtc["id"])
            await tab.submit(rtc["id"], "1\tcontent of " + rtc["parameters"]["path"])
        await tab.turn_status(sid, "completed", within=30)
        assert tab.messages(sid, "markdown")[-1]["content"]["data"] == "Both read."
    assert len({r["session_id"] for r in tab.all("rtc")}) == 2
