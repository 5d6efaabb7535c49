"""Live calls end to end (issue 15): real Daphne, a worker process, the scripted model over HTTP
and the official centrifuge-python client as the plugin and the browser.

An rtchild is created by the parent's ``rt_children`` call on two realtime channels; each input
interrupts it at whatever phase it is in (before the first chunk, mid-stream, during a tool,
right after a tool) and starts a new turn; the history keeps every call with its result; its
text streams to the output channel; it says a line before any tool; it costs nothing when idle;
stopping it, or unregistering its channel, hands it back to the parent."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from tests.turns.stack import Browser

pytestmark = [pytest.mark.django_db(transaction=True)]


@sync_to_async
def _db(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


def _call_row(**filters: Any) -> Any:
    from apps.live.models import LiveCall

    return LiveCall.objects.filter(**filters).order_by("created_at").last()


def _rows(session_id: Any) -> list[dict[str, Any]]:
    from apps.sessions.models import Message

    return [{"type": m.content["type"], "data": m.content["data"], "status": m.streaming_status}
            for m in Message.objects.filter(session_id=session_id).order_by("global_offset")]


def _turns(session_id: Any) -> list[str]:
    from apps.turns.models import Turn

    return list(Turn.objects.filter(session_id=session_id).order_by("created_at")
                .values_list("status", flat=True))


def _live(tab: Browser, kind: str | None = None) -> list[dict[str, Any]]:
    pubs = tab.rec.publications.get(f"live:u={tab.user.id}", [])
    return [p.data for p in pubs if kind is None or p.data.get("type") == kind]


def _slow(text: str, seconds: float, **more: Any) -> dict[str, Any]:
    return {"content": text, "chunk_size": 1, "chunk_delay": seconds / len(text), **more}


def _create(inputch: str = "mic", outputch: str = "speaker", **more: Any) -> dict[str, Any]:
    return {"tool_calls": [{"id": "c_rt", "name": "rt_children", "arguments": {
        "action": "create", "inputch": inputch, "outputch": outputch, **more}}]}


async def _register(tab: Browser, *, realtime: bool = True) -> None:
    await tab.rpc("v1.channel.register", {"name": "mic", "direction": "in",
                                          "realtime": realtime})
    await tab.rpc("v1.channel.register", {"name": "speaker", "direction": "out",
                                          "realtime": realtime})


async def _start_call(tab: Browser, model: Any) -> tuple[str, Any]:
    """Channels registered, the parent's agent creates the rtchild: (parent id, call row)."""
    await _register(tab)
    model.add_rule({"last_user_contains": "take the call"}, _create(instruction="Be brief."),
                   times=1)
    model.add_rule({"last_tool_result_contains": "rtchild created"},
                   {"content": "The call is answered."}, times=1)
    sid = (await tab.send("take the call"))["result"]["session_id"]
    await tab.until(lambda: any(t["status"] == "completed" for t in tab.turns(sid)), 30)
    call = await _db(_call_row, parent_session_id=sid)
    assert call is not None and call.status == "running"
    await tab.until(lambda: any(e["status"] == "running" for e in _live(tab, "live.call")))
    return sid, call


async def _say(tab: Browser, text: str) -> dict[str, Any]:
    return await tab.rpc("v1.channel.input", {"name": "mic", "text": text})


async def _settled(tab: Browser, session_id: Any, *statuses: str) -> None:
    """Wait until the call's turns are exactly ``statuses``, oldest first."""
    await tab.until(lambda: [t["status"] for t in sorted(
        tab.turns(str(session_id)), key=lambda t: t["created_at"])] == list(statuses), 15)


async def _heard(tab: Browser, text: str, within: float = 15) -> None:
    """Wait until an answer ``text`` ended on the output channel."""
    await tab.until(lambda: any(e["text"] == text for e in _live(tab, "channel.output.end")),
                    within)


def _requests_with(model: Any, text: str) -> list[Any]:
    return [r for r in model.requests
            if any(m["role"] == "user" and text in str(m.get("content"))
                   for m in r.body["messages"][-1:])]


async def test_an_input_mid_stream_cuts_the_answer_and_the_next_turn_starts_at_once(
        gateway, model, make_workers, make_user) -> None:
    make_workers(1)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        _, call = await _start_call(tab, model)
        model.add_rule({"last_user_contains": "tell me a long story"},
                       _slow("Once upon a time " * 20, 30))
        model.add_rule({"last_user_contains": "stop, what time is it"},
                       {"content": "It is noon."})
        first = await _say(tab, "tell me a long story")
        assert first["delivered"] is True and first["interrupted"] is False
        # mid-stream: some text reached the output channel
        await tab.until(lambda: len(_live(tab, "channel.output")) >= 5)
        second = await _say(tab, "stop, what time is it")
        assert second["delivered"] is True and second["interrupted"] is True
        await _heard(tab, "It is noon.")
        ends = _live(tab, "channel.output.end")
        assert ends[0]["interrupted"] is True and ends[0]["text"].startswith("Once")
        assert ends[-1] == {**ends[-1], "interrupted": False, "channel": "speaker"}
        assert any(e["turn_id"] == ends[0]["turn_id"]
                   for e in _live(tab, "channel.interrupt"))
        # text only: what went out is exactly the answers' text, in order, per turn
        outs = [e for e in _live(tab, "channel.output") if e["turn_id"] == ends[-1]["turn_id"]]
        assert "".join(e["delta"] for e in outs) == "It is noon."
        assert all(e["channel"] == "speaker" for e in _live(tab, "channel.output"))
        await _settled(tab, call.session_id, "cancelled", "completed")

    # the old stream was closed by the client, long before its 30 s were up
    story = [r for r in model.requests if r.body["messages"][-1].get("content")
             == "tell me a long story"]
    assert len(story) == 1 and story[0].outcome == "client_closed"
    # the new request: the cut answer is there as it was heard, then the new input, no replay
    (noon,) = _requests_with(model, "stop, what time is it")
    sent = noon.body["messages"]
    assert sent[0]["role"] == "system" and "live call" in sent[0]["content"]
    assert "Be brief." in sent[0]["content"]
    assert [m["role"] for m in sent[1:]] == ["user", "assistant", "user"]
    assert sent[2]["content"] == ends[0]["text"]  # as heard, not the whole story
    rows = await _db(_rows, call.session_id)
    assert [r["status"] for r in rows if r["type"] == "markdown"] == ["failed", "completed"]
    # the call's tools: no call tools of its own
    offered = {t["function"]["name"] for t in noon.body.get("tools", [])}
    assert "rt_children" not in offered and "subAgent" not in offered and "read" in offered


async def test_an_input_before_the_first_chunk_cuts_the_wait(
        gateway, model, make_workers, make_user) -> None:
    make_workers(1)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        _, call = await _start_call(tab, model)
        model.add_rule({"last_user_contains": "think hard"},
                       {"content": "Deep thoughts.", "chunk_delay": 20})
        model.add_rule({"last_user_contains": "never mind"}, {"content": "Sure."})
        await _say(tab, "think hard")
        await tab.until(lambda: any(r.body["messages"][-1].get("content") == "think hard"
                                    for r in model.requests))
        reply = await _say(tab, "never mind")
        assert reply["interrupted"] is True
        await _heard(tab, "Sure.", 10)
        await _settled(tab, call.session_id, "cancelled", "completed")
    rows = await _db(_rows, call.session_id)
    assert [r["type"] for r in rows] == ["user_message", "user_message", "markdown"]
    (sure,) = _requests_with(model, "never mind")
    assert [m["role"] for m in sure.body["messages"][1:]] == ["user", "user"]


async def test_a_running_tool_is_never_cut_and_calls_that_had_not_started_are_cancelled(
        gateway, model, make_workers, make_user) -> None:
    make_workers(1)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        _, call = await _start_call(tab, model)
        csid = str(call.session_id)
        model.add_rule({"last_user_contains": "read my notes"}, {"tool_calls": [
            {"id": "t1", "name": "read", "arguments": {"path": "/notes.md"}},
            {"id": "t2", "name": "read", "arguments": {"path": "/todo.md"}}]})
        model.add_rule({"last_user_contains": "forget it"}, {"content": "Okay, forgotten."})
        await _say(tab, "read my notes")
        rtc = await tab.pending_rtc(csid)
        # the runtime said a line before the tool, though the model said nothing
        await _heard(tab, "One moment.")
        reply = await _say(tab, "forget it")
        assert reply["interrupted"] is True
        await asyncio.sleep(1.0)  # the tool runs on: nothing failed it, no new turn yet
        row = next(r for r in tab.rtcs(csid) if r["id"] == rtc["id"])
        assert row["status"] == "pending"
        assert await _db(_turns, csid) == ["interrupted"]
        await tab.submit(rtc["id"], "# notes\nbuy milk")
        await _heard(tab, "Okay, forgotten.")
        await _settled(tab, csid, "cancelled", "completed")
    outputs = [r["data"] for r in await _db(_rows, csid) if r["type"] == "toolcall_output"]
    assert [(o["id"], o["status"]) for o in outputs] == [("t1", "completed"),
                                                          ("t2", "cancelled")]
    assert outputs[1]["output"].startswith("[Cancelled]")
    assert len([r for r in model.requests if "read my notes" in json.dumps(r.body)]) == 2
    (last,) = _requests_with(model, "forget it")
    sent = last.body["messages"]
    assert [m["role"] for m in sent[1:]] == ["user", "assistant", "tool", "tool", "user"]
    assert sent[2]["content"] == "One moment."
    assert [m["tool_call_id"] for m in sent[3:5]] == ["t1", "t2"]
    assert "buy milk" in sent[3]["content"]


async def test_an_input_right_after_a_tool_cuts_the_follow_up_answer(
        gateway, model, make_workers, make_user) -> None:
    make_workers(1)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        _, call = await _start_call(tab, model)
        csid = str(call.session_id)
        model.add_rule({"last_user_contains": "check the list"}, {
            "content": "Let me look.",
            "tool_calls": [{"id": "t1", "name": "ls", "arguments": {"path": "/"}}]})
        model.add_rule({"last_tool_result_contains": "a.txt"},
                       _slow("You have one file, called a dot t x t. " * 4, 20))
        model.add_rule({"last_user_contains": "thanks, bye"}, {"content": "Bye!"})
        await _say(tab, "check the list")
        rtc = await tab.pending_rtc(csid)
        await tab.submit(rtc["id"], "a.txt")
        await tab.until(lambda: "one file" in "".join(
            e["delta"] for e in _live(tab, "channel.output")), 15)
        reply = await _say(tab, "thanks, bye")
        assert reply["interrupted"] is True
        await _heard(tab, "Bye!")
        await _settled(tab, csid, "cancelled", "completed")
    ends = [e["text"] for e in _live(tab, "channel.output.end")]
    assert ends[0] == "Let me look."  # the model spoke first: no hold line added
    (bye,) = _requests_with(model, "thanks, bye")
    roles = [m["role"] for m in bye.body["messages"][1:]]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]


async def test_idle_costs_nothing_and_unregistering_stops_the_call_and_hands_it_over(
        gateway, model, make_workers, make_user) -> None:
    make_workers(1)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid, call = await _start_call(tab, model)
        before = len(model.requests)
        await asyncio.sleep(10)
        assert len(model.requests) == before  # no input, no model call
        model.add_rule({"last_user_contains": "hello there"}, {"content": "Hi!"})
        await _say(tab, "hello there")
        await _heard(tab, "Hi!")
        model.add_rule({"last_user_contains": "ended"}, {"content": "Noted, the call ended."})
        out = await tab.rpc("v1.channel.unregister", {"name": "mic"})
        assert out == {"unregistered": True, "stopped": [str(call.id)]}
        await tab.until(lambda: any(e["status"] == "stopped" for e in _live(tab, "live.call")))
        await tab.until(lambda: len([t for t in tab.turns(sid) if t["status"] == "completed"])
                        >= 2, 20)
        handover = [m for m in tab.messages(sid, "user_message")
                    if (m["content"]["data"].get("origin") or {}).get("kind") == "live"]
        assert len(handover) == 1
        text = handover[0]["content"]["data"]["text"]
        assert "holds 2 messages" in text and f'rt_transcript(id="{call.id}"' in text
        # a stopped call reads nothing: input to its (re-registered) channel is not delivered
        await tab.rpc("v1.channel.register", {"name": "mic", "direction": "in",
                                              "realtime": True})
        assert (await _say(tab, "anyone?"))["delivered"] is False
    row = await _db(_call_row, pk=call.id)
    assert row.status == "stopped" and "unregistered" in row.stop_reason


async def test_inputs_in_quick_succession_are_answered_once_by_the_newest(
        gateway, model, make_workers, make_user) -> None:
    make_workers(1)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        _, call = await _start_call(tab, model)
        csid = str(call.session_id)
        for word in ("first", "second"):
            model.add_rule({"last_user_contains": f"{word} thought"},
                           _slow(f"About your {word} thought: yes.", 3))
        model.add_rule({"last_user_contains": "third thought"}, {"content": "Got all three."})
        replies = [await _say(tab, f"{word} thought") for word in ("first", "second", "third")]
        assert all(r["delivered"] for r in replies)
        await _heard(tab, "Got all three.")
        await tab.until(lambda: tab.turns(csid) and all(
            t["status"] in ("completed", "cancelled") for t in tab.turns(csid)))
        statuses = [t["status"] for t in sorted(tab.turns(csid), key=lambda t: t["created_at"])]
    # only the newest input's answer completed; no earlier one ran to its end
    assert statuses[-1] == "completed" and set(statuses[:-1]) <= {"cancelled"}, statuses
    for r in model.requests:
        last = r.body["messages"][-1].get("content")
        if last in ("first thought", "second thought"):
            assert r.outcome == "client_closed", (last, r.outcome)
    (final,) = _requests_with(model, "third thought")
    said = [m["content"] for m in final.body["messages"] if m["role"] == "user"]
    assert said == ["first thought", "second thought", "third thought"]  # in order, each once


async def test_inputs_queued_behind_a_tool_are_answered_once_and_never_again_later(
        gateway, model, make_workers, make_user) -> None:
    """Inputs that arrive while a tool runs wait for it; the newest answers them all, and
    the ones it took in are not picked up later as lost messages (the sweep runs every
    second here, and takes messages without a turn after 1.5 s)."""
    make_workers(1)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        _, call = await _start_call(tab, model)
        csid = str(call.session_id)
        model.add_rule({"last_user_contains": "look it up"}, {"tool_calls": [
            {"id": "t1", "name": "read", "arguments": {"path": "/a.md"}}]})
        for word in ("wait", "actually"):
            model.add_rule({"last_user_contains": word}, {"content": f"Answer to {word}."})
        await _say(tab, "look it up")
        rtc = await tab.pending_rtc(csid)
        for word in ("wait", "actually"):
            assert (await _say(tab, word))["interrupted"] is True
        await tab.submit(rtc["id"], "contents")
        await _heard(tab, "Answer to actually.")
        await _settled(tab, csid, "cancelled", "completed")
        seen = len(model.requests)
        await asyncio.sleep(4)  # several sweeps
        assert len(model.requests) == seen
        assert not any(e["text"] == "Answer to wait." for e in _live(tab, "channel.output.end"))
        await _settled(tab, csid, "cancelled", "completed")
    (last,) = _requests_with(model, "actually")
    said = [m["content"] for m in last.body["messages"] if m["role"] == "user"]
    assert said == ["look it up", "wait", "actually"]


async def test_a_stopped_call_answers_nothing_that_was_queued_before_the_stop(
        gateway, model, make_workers, make_user) -> None:
    make_workers(1)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid, call = await _start_call(tab, model)
        csid = str(call.session_id)
        model.add_rule({"last_user_contains": "check the file"}, {"tool_calls": [
            {"id": "t1", "name": "read", "arguments": {"path": "/a.md"}}]})
        model.add_rule({"last_user_contains": "hello"}, {"content": "Answer after stop."})
        await _say(tab, "check the file")
        await tab.pending_rtc(csid)
        await _say(tab, "hello")  # waits for the tool
        model.add_rule({"last_user_contains": "ended"}, {"content": "Noted."})
        await tab.rpc("v1.channel.unregister", {"name": "speaker"})  # the plugin went away
        await tab.until(lambda: any(e["status"] == "stopped" for e in _live(tab, "live.call")))
        await _settled(tab, csid, "cancelled")
        await asyncio.sleep(3)  # the worker had the input queued; the sweep runs too
        await _settled(tab, csid, "cancelled")
        assert not _requests_with(model, "hello")
        assert not any(e["text"] == "Answer after stop."
                       for e in _live(tab, "channel.output.end"))
        rtc = tab.rtcs(csid)[0]
        assert rtc["status"] == "failed"  # hung up: the tool's wait ends with the call
        # the parent got the hand-over and answered it
        await tab.until(lambda: len([t for t in tab.turns(sid) if t["status"] == "completed"])
                        >= 2, 20)


async def test_tools_a_call_is_not_offered_do_not_run(
        gateway, model, make_workers, make_user) -> None:
    make_workers(1)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        _, call = await _start_call(tab, model)
        csid = str(call.session_id)
        model.add_rule({"last_user_contains": "remind me hourly"}, {
            "content": "Sure.",
            "tool_calls": [{"id": "t1", "name": "loop", "arguments": {
                "prompt": "remind", "interval_seconds": 3600}}]})
        model.add_rule({"last_tool_result_contains": "unknown tool"},
                       {"content": "I cannot do that in a call."})
        await _say(tab, "remind me hourly")
        await _heard(tab, "I cannot do that in a call.")
        await _settled(tab, csid, "completed")
        # each answer of the turn is its own entry for a plugin: its own message id
        ends = [e for e in _live(tab, "channel.output.end") if e["session_id"] == csid]
        assert len({e["message_id"] for e in ends}) == len(ends) == 2
    outputs = [r["data"] for r in await _db(_rows, csid) if r["type"] == "toolcall_output"]
    assert outputs[0]["output"] == "[Tool Error] unknown tool 'loop'"

    def loops() -> int:
        from apps.tasks.models import Loop

        return Loop.objects.count()

    assert await _db(loops) == 0
