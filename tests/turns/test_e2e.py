"""The agent engine end to end: real HTTP (scripted model), real Daphne, two worker processes,
and the official centrifuge-python client playing the browser."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from asgiref.sync import sync_to_async
from centrifuge import ReplyError

from apps.turns import compaction
from tests.turns.stack import Browser

pytestmark = [pytest.mark.django_db(transaction=True)]


def _tool_messages(body: dict) -> list[dict]:
    return [m for m in body["messages"] if m["role"] == "tool"]


def _assert_pairs(body: dict) -> None:
    """Every tool call sent to the model has its result right after, and vice versa."""
    msgs = body["messages"]
    for i, m in enumerate(msgs):
        if m["role"] == "assistant" and m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            following = [x["tool_call_id"] for x in msgs[i + 1 : i + 1 + len(ids)]
                         if x["role"] == "tool"]
            assert following == ids, msgs
        if m["role"] == "tool":
            previous = [x for x in msgs[:i] if x["role"] == "assistant" and x.get("tool_calls")]
            assert any(m["tool_call_id"] in [c["id"] for c in x["tool_calls"]] for x in previous)


async def test_text_answer_streams_and_completes(gateway, pool, model, make_user) -> None:
    model.add_rule({"last_user_contains": "hello"},
                   {"content": "Hi there, how can I help?", "chunk_size": 3,
                    "usage": {"prompt_tokens": 40, "completion_tokens": 7, "cached_tokens": 8}})
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sent = await tab.send("hello agent")
        sid = sent["result"]["session_id"]
        turn = await tab.turn_status(sid, "completed")
        assert sent["result"]["turn_id"] == turn["id"]  # created with the message
        (answer,) = tab.messages(sid, "markdown")
        assert answer["content"]["data"] == "Hi there, how can I help?"
        assert answer["streaming_status"] == "completed"
        assert answer["cached_tokens"] == 8
        assert turn["input_tokens"] == 40 and turn["cached_tokens"] == 8
        session = next(s for s in tab.all("session") if s["id"] == sid)
        assert session["status"] == "idle" and session["total_tokens"] == 47
        chunks = [p.data for p in tab.rec.publications.get(f"live:u={user.id}", [])]
        assert "".join(c["delta"] for c in chunks) == "Hi there, how can I help?"
        assert {c["message_id"] for c in chunks} == {answer["id"]}
    (request,) = model.requests
    assert request.headers["authorization"] == "Bearer sk-test-key"
    assert request.body["messages"][0]["role"] == "system"
    assert request.body["messages"][-1] == {"role": "user", "content": "hello agent"}
    assert {t["function"]["name"] for t in request.body["tools"]} >= {"read", "write", "askUser"}


async def test_write_then_read_round_trip(gateway, pool, model, make_user) -> None:
    model.add_rule({"last_user_contains": "note"}, {"content": "Writing.", "tool_calls": [
        {"id": "call_w", "name": "write", "arguments": {"path": "/a.md", "content": "# A\n"}}]})
    model.add_rule({"last_tool_result_contains": "wrote 4 bytes"}, {"tool_calls": [
        {"id": "call_r", "name": "read", "arguments": {"path": "/a.md"}}]})
    model.add_rule({"last_tool_result_contains": "1\t# A"}, {"content": "The file says: # A"})
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("take a note"))["result"]["session_id"]
        write = await tab.pending_rtc(sid)
        assert write["tool_name"] == "write" and write["needs_approval"] is False
        assert write["parameters"] == {"path": "/a.md", "content": "# A\n"}
        await tab.turn_status(sid, "interrupted")
        await tab.rpc("v1.rtc.update_status", {"rtc_id": write["id"], "status": "executing"})
        await tab.submit(write["id"], "wrote 4 bytes to /a.md")
        read = await tab.until(lambda: next(iter(
            r for r in tab.rtcs(sid, "pending") if r["tool_name"] == "read"), None))
        await tab.submit(read["id"], "1\t# A")
        await tab.turn_status(sid, "completed")
        outputs = [m["content"]["data"] for m in tab.messages(sid, "toolcall_output")]
        assert [(o["id"], o["output"]) for o in outputs] == [
            ("call_w", "wrote 4 bytes to /a.md"), ("call_r", "1\t# A")]
        assert tab.messages(sid, "markdown")[-1]["content"]["data"] == "The file says: # A"
        assert [r["status"] for r in tab.rtcs(sid)] == ["completed", "completed"]
    requests = model.requests
    assert len(requests) == 3
    for req in requests:
        _assert_pairs(req.body)
    assert _tool_messages(requests[2].body)[-1]["content"] == "1\t# A"


@pytest.mark.parametrize(("mode", "tool", "asked"), [
    ("manual", "write", True), ("plan", "write", True), ("auto", "write", False),
    ("edit", "write", False), ("auto", "script", True), ("bypass", "script", False),
    ("manual", "read", False),
])
async def test_approval_follows_the_work_mode(gateway, pool, model, make_user, mode, tool, asked):
    model.add_rule({"last_user_contains": "go"}, {"tool_calls": [
        {"name": tool, "arguments": {"path": "/x", "content": "x", "action": "eval", "code": "1"}
         if tool != "read" else {"path": "/x"}}]})
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("go", work_mode=mode))["result"]["session_id"]
        rtc = await tab.pending_rtc(sid)
        assert rtc["needs_approval"] is asked


async def test_rejection_tells_the_model_and_the_turn_goes_on(gateway, pool, model, make_user):
    model.add_rule({"last_user_contains": "delete"}, {"tool_calls": [
        {"name": "write", "arguments": {"path": "/x", "content": ""}}]})
    model.add_rule({"last_tool_result_contains": "[Tool Rejected]"}, {"content": "Understood."})
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("delete everything", work_mode="manual"))["result"]["session_id"]
        rtc = await tab.pending_rtc(sid)
        reply = await tab.rpc("v1.rtc.update_status", {
            "rtc_id": rtc["id"], "status": "rejected", "reason": "not my files"})
        assert reply["result"]["rtc"]["status"] == "rejected"
        await tab.turn_status(sid, "completed")
    assert _tool_messages(model.requests[-1].body)[-1]["content"] == "[Tool Rejected] not my files"


async def test_duplicate_and_refused_submissions(gateway, pool, model, make_user) -> None:
    model.add_rule({"last_user_contains": "list"}, {"tool_calls": [
        {"name": "ls", "arguments": {"path": "/"}}]})
    model.add_rule({"last_role": "tool"}, {"content": "ok"})
    alice, bob = await sync_to_async(make_user)(), await sync_to_async(make_user)()
    async with Browser(gateway, alice) as tab, Browser(gateway, bob) as other:
        sid = (await tab.send("list files"))["result"]["session_id"]
        rtc = await tab.pending_rtc(sid)
        with pytest.raises(ReplyError) as err:  # another user's RTC does not exist for them
            await other.submit(rtc["id"], "stolen")
        assert err.value.code == 404 and err.value.message.startswith("rtc.not_found")
        await tab.rpc("v1.rtc.update_status", {"rtc_id": rtc["id"], "status": "executing"})
        with pytest.raises(ReplyError) as err:  # never backwards
            await tab.rpc("v1.rtc.update_status", {"rtc_id": rtc["id"], "status": "sent"})
        assert err.value.message.startswith("invalid_state")
        first = await tab.submit(rtc["id"], "a.md", client_id="c-1")
        again = await tab.submit(rtc["id"], "a.md", client_id="c-1")
        different = await tab.submit(rtc["id"], "b.md", client_id="c-2")
        assert first["result"]["duplicate"] is False and len(first["updates"]) == 1
        assert again["result"]["duplicate"] is True and again["updates"] == []
        assert different["result"]["duplicate"] is False and different["updates"] == []
        assert different["result"]["rtc"]["result"] == "a.md"
        await tab.turn_status(sid, "completed")
    assert _tool_messages(model.requests[-1].body)[-1]["content"] == "a.md"
    assert len(model.requests) == 2  # the repeats resumed nothing


async def test_two_tool_calls_run_one_after_the_other(gateway, pool, model, make_user) -> None:
    model.add_rule({"last_user_contains": "both"}, {"tool_calls": [
        {"id": "c1", "name": "read", "arguments": {"path": "/1"}},
        {"id": "c2", "name": "read", "arguments": {"path": "/2"}}]})
    model.add_rule({"last_role": "tool"}, {"content": "read both"})
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("read both"))["result"]["session_id"]
        first = await tab.pending_rtc(sid)
        await asyncio.sleep(0.5)
        assert [r["tool_call_id"] for r in tab.rtcs(sid)] == ["c1"]  # one RTC at a time
        await tab.submit(first["id"], "one")
        second = await tab.until(lambda: next(iter(
            r for r in tab.rtcs(sid, "pending") if r["tool_call_id"] == "c2"), None))
        await tab.submit(second["id"], "two")
        await tab.turn_status(sid, "completed")
    final = model.requests[-1].body
    _assert_pairs(final)
    assert [m["content"] for m in _tool_messages(final)] == ["one", "two"]


async def test_messages_sent_during_a_turn_queue_behind_it(gateway, pool, model, make_user):
    model.add_rule({"last_user_contains": "first"}, {"tool_calls": [
        {"name": "ls", "arguments": {}}]})
    model.add_rule({"last_role": "tool"}, {"content": "done first"})
    model.add_rule({"last_user_contains": "second"}, {"content": "done second"})
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("first"))["result"]["session_id"]
        rtc = await tab.pending_rtc(sid)
        await tab.send("second", session_id=sid)
        await asyncio.sleep(1.0)
        assert len(tab.turns(sid)) == 1  # the second waits for the first
        await tab.submit(rtc["id"], "nothing here")
        await tab.until(lambda: len([t for t in tab.turns(sid) if t["status"] == "completed"]) == 2)
        texts = [m["content"]["data"] for m in tab.messages(sid, "markdown")]
        assert texts == ["done first", "done second"]
    last = model.requests[-1].body["messages"]
    assert last[-1] == {"role": "user", "content": "second"}
    assert {"role": "assistant", "content": "done first"} in last


async def test_client_id_is_idempotent(gateway, pool, model, make_user) -> None:
    model.add_rule({"last_role": "user"}, {"content": "ok"})
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        cid = str(uuid.uuid4())
        sent = await tab.send("once", client_id=cid)
        with pytest.raises(ReplyError) as err:
            await tab.send("once", client_id=cid)
        assert err.value.code == 409
        assert err.value.message.startswith("client_id_conflict")
        assert sent["result"]["session_id"] in err.value.message
        assert sent["result"]["message_id"] in err.value.message
        await tab.turn_status(sent["result"]["session_id"], "completed")
        assert len(tab.turns(sent["result"]["session_id"])) == 1


async def test_stop_while_streaming_keeps_the_partial_text(gateway, pool, model, make_user):
    long = "word " * 200
    model.add_rule({"last_user_contains": "essay"},
                   {"content": long, "chunk_size": 5, "chunk_delay": 0.05})
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("write an essay"))["result"]["session_id"]
        live = f"live:u={user.id}"
        await tab.until(lambda: len(tab.rec.publications.get(live, [])) >= 3)
        loop = asyncio.get_running_loop()
        asked = loop.time()
        reply = await tab.rpc("v1.turn.stop", {"session_id": sid})
        assert reply["updates"] == [] and reply["result"]["turn_id"]
        await tab.turn_status(sid, "cancelled", within=5)
        assert loop.time() - asked < 1.5
        (answer,) = tab.messages(sid, "markdown")
        assert answer["streaming_status"] == "failed"
        assert 0 < len(answer["content"]["data"]) < len(long)
        assert long.startswith(answer["content"]["data"])
    await asyncio.to_thread(model.wait_for_requests, 1)
    assert model.requests[0].outcome == "client_closed"


async def test_stop_while_waiting_closes_the_rtc(gateway, pool, model, make_user) -> None:
    model.add_rule({"last_user_contains": "ask"}, {"tool_calls": [{"name": "askUser", "arguments": {
        "questions": [{"question": "Which?", "header": "Pick",
                       "options": [{"label": "A"}, {"label": "B"}]}]}}]})
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("ask me"))["result"]["session_id"]
        rtc = await tab.pending_rtc(sid)
        await tab.turn_status(sid, "interrupted")
        await tab.rpc("v1.turn.stop", {"session_id": sid})
        await tab.turn_status(sid, "cancelled")
        closed = await tab.until(lambda: next(iter(tab.rtcs(sid, "failed")), None))
        assert closed["id"] == rtc["id"]
        late = await tab.submit(rtc["id"], "A")
        assert late["updates"] == [] and late["result"]["rtc"]["status"] == "failed"
    assert len(model.requests) == 1


# attempts: the workers allow 2 for transient failures, but never once text was streamed; a
# "context too long" answer gets one retry after reactive compaction
@pytest.mark.parametrize(("reply", "category", "retryable", "attempts"), [
    ({"error": {"status": 401, "message": "Incorrect API key provided"}}, "permission", False, 1),
    ({"error": {"status": 429, "message": "Rate limit reached"}}, "api", True, 2),
    ({"malformed": True, "content": "partial answer that breaks"}, "stream", True, 1),
    ({"error": {"status": 400, "code": "context_length_exceeded",
                "message": "maximum context length is 8192 tokens"}}, "context", False, 2),
])
async def test_model_failures_become_error_messages(
    gateway, pool, model, make_user, reply, category, retryable, attempts
) -> None:
    model.add_rule({"last_user_contains": "fail"}, reply)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("please fail"))["result"]["session_id"]
        turn = await tab.turn_status(sid, "failed")
        assert turn["error_message"].startswith(f"{category}:")
        (error,) = await tab.until(lambda: tab.messages(sid, "error"))
        data = error["content"]["data"]
        assert data["category"] == category and data["retryable"] is retryable
        assert data["title"] and data["message"]
        assert "raw_error" not in data  # debug.show_raw_errors is off
        assert "sk-test-key" not in str(data)
        for partial in tab.messages(sid, "markdown"):  # text cut by the failure is kept
            assert partial["streaming_status"] == "failed"
            assert "partial answer that breaks".startswith(partial["content"]["data"])
    assert len(model.requests) == attempts


async def test_host_functions_are_offered_with_their_approval_class(
    gateway, pool, model, make_user
) -> None:
    model.add_rule({"last_user_contains": "pay", "tool_offered": "payInvoice"},
                   {"tool_calls": [{"name": "payInvoice", "arguments": {"id": 7}}]})
    user = await sync_to_async(make_user)()
    functions = [{"name": "payInvoice", "description": "Pay an invoice", "class": "write",
                  "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}}}]
    async with Browser(gateway, user) as tab:
        with pytest.raises(ReplyError) as err:
            await tab.send("pay", host_functions=[{"name": "read", "class": "read"}])
        assert err.value.message.startswith("invalid_request: host_functions:")
        sid = (await tab.send("pay it", work_mode="manual",
                              host_functions=functions))["result"]["session_id"]
        rtc = await tab.pending_rtc(sid)
        assert (rtc["tool_name"], rtc["parameters"], rtc["needs_approval"]) == (
            "payInvoice", {"id": 7}, True)
    offered = {t["function"]["name"] for t in model.requests[0].body["tools"]}
    assert "payInvoice" in offered and "read" in offered


async def test_compaction_replaces_the_earlier_conversation(gateway, pool, model, make_user):
    model.add_rule({"last_user_contains": "Use these sections"},
                   {"content": "The user greeted twice; nothing pending.", "chunk_delay": 0.05})
    model.add_rule({"last_role": "user"}, {"content": "noted"})
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("first hello"))["result"]["session_id"]
        await tab.turn_status(sid, "completed")
        await tab.send("second hello", session_id=sid)
        await tab.until(lambda: len([t for t in tab.turns(sid) if t["status"] == "completed"]) == 2)
        reply = await tab.rpc("v1.session.compact", {"session_id": sid,
                                                      "custom_instruction": "Keep names."})
        again = await tab.rpc("v1.session.compact", {"session_id": sid})
        assert reply == {"result": {"success": True, "queued": True}, "updates": []}
        assert again["result"]["queued"] is False  # one compaction at a time
        (summary,) = await tab.until(lambda: tab.messages(sid, "summary"))
        assert summary["content"]["data"][0]["content"] == (
            "The user greeted twice; nothing pending.")
        await tab.send("third hello", session_id=sid)
        await tab.until(lambda: len([t for t in tab.turns(sid) if t["status"] == "completed"]) == 3)
    asked = model.requests[2].body["messages"]
    assert asked[-1]["content"].startswith("<conversation>")
    assert asked[-1]["content"].endswith(compaction.SUMMARY_PROMPT)
    assert "Keep names." in asked[0]["content"]  # it steers the summariser, not appended
    assert len(model.requests) == 4  # the second compact request did not run
    last = model.requests[-1].body["messages"]
    # the summary, then the recent tail kept as it was ("second hello", "noted"), then the new
    assert [m["role"] for m in last] == ["system", "system", "user", "assistant", "user"]
    assert last[1]["content"].endswith("The user greeted twice; nothing pending.")
    assert last[2]["content"] == "second hello" and last[3]["content"] == "noted"
    assert last[4] == {"role": "user", "content": "third hello"}
    assert not any("first hello" in str(m.get("content")) for m in last)


async def test_a_tool_call_id_reused_in_a_later_answer_gets_its_own_rtc(
    gateway, pool, model, make_user
) -> None:
    """Models number calls per answer ("call_0" again and again): each call is its own RTC."""
    model.add_rule({"last_user_contains": "twice"}, {"tool_calls": [
        {"id": "call_0", "name": "ls", "arguments": {}}]})
    model.add_rule({"last_tool_result_contains": "listing"}, {"tool_calls": [
        {"id": "call_0", "name": "read", "arguments": {"path": "/a.txt"}}]})
    model.add_rule({"last_tool_result_contains": "contents"}, {"content": "done"})
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("list then read, twice the same id"))["result"]["session_id"]
        first = await tab.pending_rtc(sid)
        assert first["tool_name"] == "ls"
        await tab.submit(first["id"], "listing")
        second = await tab.until(lambda: next(iter(
            r for r in tab.rtcs(sid, "pending") if r["tool_name"] == "read"), None))
        assert second["id"] != first["id"] and second["tool_call_id"] == "call_0"
        await tab.submit(second["id"], "contents")
        await tab.turn_status(sid, "completed")
    final = model.requests[-1].body
    assert [m["content"] for m in _tool_messages(final)] == ["listing", "contents"]
