"""Crash safety and failures with real processes: kill -9 workers and the web process."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async

from apps.rtc.models import Rtc
from apps.sessions.models import Message
from apps.turns import state
from apps.turns.models import Turn
from rtcagent.redis import get_redis
from tests.livesrv import start_daphne
from tests.turns.stack import Browser

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _counts(session_id: str) -> dict[str, int]:
    msgs = Message.objects.filter(session_id=session_id)
    return {
        "rtcs": Rtc.objects.filter(session_id=session_id).count(),
        "distinct_rtc_calls": Rtc.objects.filter(session_id=session_id)
        .values("tool_call_id").distinct().count(),
        "messages": msgs.count(),
        "distinct_keys": msgs.values("client_id").distinct().count(),
        "turns": Turn.objects.filter(session_id=session_id).count(),
    }


counts = sync_to_async(_counts)


async def test_worker_killed_while_the_model_streams(gateway, model, make_workers, make_user):
    text = "".join(f"part{i} " for i in range(40))
    model.add_rule({"last_user_contains": "story"},
                   {"content": text, "chunk_size": 6, "chunk_delay": 0.08})
    workers = make_workers(1)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("tell a story"))["result"]["session_id"]
        live = f"live:u={user.id}"
        await tab.until(lambda: len(tab.rec.publications.get(live, [])) >= 3)
        workers.kill()
        make_workers(1)
        await tab.turn_status(sid, "completed", within=40)
        (answer,) = tab.messages(sid, "markdown")
        assert answer["content"]["data"] == text and answer["streaming_status"] == "completed"
    c = await counts(sid)
    assert c["turns"] == 1 and c["messages"] == c["distinct_keys"] == 2  # user + answer
    assert len(model.requests) == 2  # the interrupted stream was asked again


async def test_worker_killed_while_an_rtc_waits(gateway, model, make_workers, make_user):
    model.add_rule({"last_user_contains": "look"}, {"tool_calls": [
        {"id": "c1", "name": "ls", "arguments": {"path": "/"}}]})
    model.add_rule({"last_tool_result_contains": "a.md"}, {"content": "You have a.md."})
    workers = make_workers(1)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("look around"))["result"]["session_id"]
        rtc = await tab.pending_rtc(sid)
        await tab.turn_status(sid, "interrupted")
        workers.kill()
        await tab.submit(rtc["id"], "a.md")
        make_workers(1)
        await tab.turn_status(sid, "completed", within=40)
    c = await counts(sid)
    assert c["rtcs"] == c["distinct_rtc_calls"] == 1
    assert c["messages"] == c["distinct_keys"]
    final = model.requests[-1].body["messages"]
    assert final[-2]["tool_calls"][0]["id"] == "c1"
    assert final[-1] == {"role": "tool", "tool_call_id": "c1", "content": "a.md"}


async def test_worker_killed_while_it_waits_for_a_result_in_place(
        gateway, model, make_workers, make_user):
    """The worker holds the turn (running) while it waits for the result (``RTC_RESULT_WAIT``)
    and is killed there: the item it was running comes back after the lease, and the new
    worker takes the turn up waiting on the same RTC; the result, sent after the kill, is
    recorded once and the model asked once more."""
    model.add_rule({"last_user_contains": "look"}, {"tool_calls": [
        {"id": "c1", "name": "ls", "arguments": {"path": "/"}}]})
    model.add_rule({"last_tool_result_contains": "a.md"}, {"content": "You have a.md."})
    workers = make_workers(1, RTC_RESULT_WAIT="60", RTC_WORKER_LEASE_MS="2000")
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("look around"))["result"]["session_id"]
        rtc = await tab.pending_rtc(sid)
        await asyncio.sleep(0.3)  # the worker is waiting now, the turn still running
        turn = await sync_to_async(Turn.objects.get)(session_id=sid)
        assert turn.status == "running"
        workers.kill()
        await tab.submit(rtc["id"], "a.md")
        make_workers(1, RTC_WORKER_LEASE_MS="2000")
        await tab.turn_status(sid, "completed", within=40)
    c = await counts(sid)
    assert c["rtcs"] == c["distinct_rtc_calls"] == 1
    assert c["messages"] == c["distinct_keys"]
    assert len(model.requests) == 2
    final = model.requests[-1].body["messages"]
    assert final[-2]["tool_calls"][0]["id"] == "c1"
    assert final[-1] == {"role": "tool", "tool_call_id": "c1", "content": "a.md"}


async def test_a_lost_resume_is_found_by_the_sweeper(gateway, model, make_workers, make_user):
    """The result committed but its resume never reached the queue (the web process died
    between the two): the sweeper notices the waiting turn and resumes it."""
    model.add_rule({"last_user_contains": "look"}, {"tool_calls": [
        {"name": "ls", "arguments": {}}]})
    model.add_rule({"last_role": "tool"}, {"content": "done"})
    workers = make_workers(1)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("look"))["result"]["session_id"]
        rtc = await tab.pending_rtc(sid)
        await tab.turn_status(sid, "interrupted")
        workers.kill()
        await tab.submit(rtc["id"], "nothing")
        r = get_redis()
        for key in r.scan_iter("rtc:q:*"):
            r.delete(key)  # the resume item is gone
        make_workers(1)
        await tab.turn_status(sid, "completed", within=40)


async def test_web_process_killed_while_an_rtc_waits(
    model, make_workers, make_user, tmp_path
) -> None:
    web = start_daphne(tmp_path, RTC_PING_INTERVAL="2", RTC_PONG_TIMEOUT="1")
    model.add_rule({"last_user_contains": "look"}, {"tool_calls": [
        {"name": "ls", "arguments": {}}]})
    model.add_rule({"last_role": "tool"}, {"content": "done"})
    make_workers(1)
    user = await sync_to_async(make_user)()
    try:
        async with Browser(web, user) as tab:
            sid = (await tab.send("look"))["result"]["session_id"]
            rtc = await tab.pending_rtc(sid)
            web.proc.kill()
            web.proc.wait(10)
            web = start_daphne(tmp_path, port=web.port, RTC_PING_INTERVAL="2")
            await tab.rec.wait_for(lambda: len(tab.rec.of("connected")) == 2, within=30)
            topic = tab.rec.subscribed(f"topic:u={user.id}")[-1]
            assert topic.was_recovering and topic.recovered
            await tab.submit(rtc["id"], "nothing")
            await tab.turn_status(sid, "completed", within=30)
    finally:
        web.stop()


async def test_a_running_turn_without_checkpoint_fails_clearly(
    gateway, model, make_workers, make_user
) -> None:
    model.add_rule({"last_user_contains": "slow"},
                   {"content": "x" * 200, "chunk_size": 2, "chunk_delay": 0.05})
    workers = make_workers(1)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("slow please"))["result"]["session_id"]
        turn = await tab.turn_status(sid, "running")
        await tab.until(lambda: tab.rec.publications.get(f"live:u={user.id}"))
        workers.kill()
        await sync_to_async(state.checkpoint_delete)(turn["id"])  # both copies: Redis and DB
        make_workers(1)
        failed = await tab.turn_status(sid, "failed", within=40)
        assert failed["error_message"] == "system: Turn state lost"
        (error,) = await tab.until(lambda: tab.messages(sid, "error"))
        assert error["content"]["data"]["retryable"] is True


async def test_rtc_timeout_resumes_with_tool_timeout(gateway, model, make_workers, make_user):
    model.add_rule({"last_user_contains": "wait"}, {"tool_calls": [
        {"name": "read", "arguments": {"path": "/slow"}}]})
    model.add_rule({"last_tool_result_contains": "[Tool Timeout]"}, {"content": "It timed out."})
    make_workers(1, RTC_DEADLINE_SECONDS="1")
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("wait for it"))["result"]["session_id"]
        rtc = await tab.pending_rtc(sid)
        await tab.turn_status(sid, "completed", within=30)
        assert next(r for r in tab.rtcs(sid) if r["id"] == rtc["id"])["status"] == "timeout"
        late = await tab.submit(rtc["id"], "too late")
        assert late["updates"] == []
    assert model.requests[-1].body["messages"][-1]["content"] == "[Tool Timeout]"


async def test_no_api_key_fails_with_instructions(gateway, model, make_workers, make_user):
    make_workers(1, OPENAI_API_KEY="")
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("hello"))["result"]["session_id"]
        await tab.turn_status(sid, "failed")
        (error,) = await tab.until(lambda: tab.messages(sid, "error"))
        data = error["content"]["data"]
        assert data["category"] == "api"
        assert "OPENAI_API_KEY" in data["message"]
    assert model.requests == []


async def test_connection_refused_is_a_network_error(gateway, model, make_workers, make_user):
    from tests.livesrv import free_port

    make_workers(1, base_url=f"http://127.0.0.1:{free_port()}/v1")
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("hello"))["result"]["session_id"]
        await tab.turn_status(sid, "failed", within=30)
        (error,) = await tab.until(lambda: tab.messages(sid, "error"))
        assert error["content"]["data"]["category"] == "network"


async def test_two_workers_never_run_one_session_twice(gateway, model, make_workers, make_user):
    model.add_rule({"last_role": "user"}, {"content": "ok", "chunk_delay": 0.02})
    make_workers(2)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("m0"))["result"]["session_id"]
        for i in range(1, 6):
            await tab.send(f"m{i}", session_id=sid)
        await tab.until(
            lambda: len([t for t in tab.turns(sid) if t["status"] == "completed"]) == 6, within=60
        )
        await asyncio.sleep(0.3)
    asked = [r.body["messages"][-1]["content"] for r in model.requests]
    assert asked == [f"m{i}" for i in range(6)]  # in order, each once
