"""Several turns per worker process (``RTC_WORKER_TURNS`` / ``rtc_worker --turns``), end to end:
real Daphne, worker processes, the scripted model over HTTP and the official client.

One process streams the turns of different sessions at the same time, sync sub-agents of one
answer run side by side in it, a session is still never run twice, and SIGTERM lets every
running turn finish before the process exits."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from apps.turns.models import Turn
from tests.turns.stack import Browser

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _slow(text: str, seconds: float) -> dict[str, Any]:
    """A reply streamed one character at a time over about ``seconds``."""
    return {"content": text, "chunk_size": 1, "chunk_delay": seconds / len(text)}


def _streaming(model: Any, marker: str) -> list[Any]:
    """The model requests whose last message contains ``marker`` and whose answer is still
    being streamed."""
    return [r for r in model.requests if r.outcome == "pending"
            and marker in str(r.body["messages"][-1].get("content", ""))]


async def _until(cond: Any, within: float = 30.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not (value := cond()):
        if loop.time() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.02)
    return value


@sync_to_async
def _statuses(session_id: str) -> list[str]:
    return list(Turn.objects.filter(session_id=session_id).order_by("created_at")
                .values_list("status", flat=True))


async def test_one_process_streams_two_sessions_turns_at_once(
        gateway, model, make_workers, make_user) -> None:
    model.add_rule({"last_user_contains": "ALPHA"}, _slow("Alpha answer, slowly.", 3))
    model.add_rule({"last_user_contains": "BETA"}, _slow("Beta answer, slowly.", 3))
    make_workers(1)  # the default: several turns at once
    alice, bob = await sync_to_async(make_user)(), await sync_to_async(make_user)()
    async with Browser(gateway, alice) as a_tab, Browser(gateway, bob) as b_tab:
        a_sid = (await a_tab.send("ALPHA please"))["result"]["session_id"]
        b_sid = (await b_tab.send("BETA please"))["result"]["session_id"]
        # both answers are being streamed by the one process at the same moment
        await _until(lambda: _streaming(model, "ALPHA") and _streaming(model, "BETA"))
        await a_tab.turn_status(a_sid, "completed", within=40)
        await b_tab.turn_status(b_sid, "completed", within=40)
        assert [m["content"]["data"] for m in a_tab.messages(a_sid, "markdown")] == [
            "Alpha answer, slowly."]
        assert [m["content"]["data"] for m in b_tab.messages(b_sid, "markdown")] == [
            "Beta answer, slowly."]
        assert b_tab.all("session") and all(s["id"] != a_sid for s in b_tab.all("session"))
    assert await _statuses(a_sid) == ["completed"]
    assert await _statuses(b_sid) == ["completed"]
    assert len(model.requests) == 2  # nothing was asked twice


async def test_with_one_turn_per_process_the_second_session_waits(
        gateway, model, make_workers, make_user) -> None:
    model.add_rule({"last_user_contains": "ALPHA"}, _slow("Alpha answer, slowly.", 2))
    model.add_rule({"last_user_contains": "BETA"}, {"content": "Beta answer."})
    make_workers(1, turns=1)
    alice, bob = await sync_to_async(make_user)(), await sync_to_async(make_user)()
    async with Browser(gateway, alice) as a_tab, Browser(gateway, bob) as b_tab:
        a_sid = (await a_tab.send("ALPHA please"))["result"]["session_id"]
        await _until(lambda: _streaming(model, "ALPHA"))
        b_sid = (await b_tab.send("BETA please"))["result"]["session_id"]
        await b_tab.turn_status(b_sid, "completed", within=40)
        alpha = next(r for r in model.requests if "ALPHA" in str(r.body["messages"][-1]))
        assert alpha.outcome == "completed"  # Bob's turn began only after Alice's ended
        await a_tab.turn_status(a_sid, "completed", within=40)


async def test_sync_sub_agents_run_side_by_side_in_one_process(
        gateway, model, make_workers, make_user) -> None:
    model.add_rule({"last_user_contains": "two reports"}, {"tool_calls": [
        {"id": "c_1", "name": "subAgent", "arguments": {
            "title": "Report one", "instruction": "TASK-R1: write", "mode": "sync"}},
        {"id": "c_2", "name": "subAgent", "arguments": {
            "title": "Report two", "instruction": "TASK-R2: write", "mode": "sync"}}]})
    model.add_rule({"last_user_contains": "TASK-R1"}, _slow("Report one is done.", 3))
    model.add_rule({"last_user_contains": "TASK-R2"}, _slow("Report two is done.", 3))
    model.add_rule({"last_tool_result_contains": "Report two is done"},
                   {"content": "Both reports are done."})
    make_workers(1)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("write two reports"))["result"]["session_id"]
        await _until(lambda: _streaming(model, "TASK-R1") and _streaming(model, "TASK-R2"))
        await tab.turn_status(sid, "completed", within=40)
        assert [m["content"]["data"] for m in tab.messages(sid, "markdown")] == [
            "Both reports are done."]


async def test_sigterm_lets_every_running_turn_finish(
        gateway, model, make_workers, make_user) -> None:
    model.add_rule({"last_user_contains": "ALPHA"}, _slow("Alpha answer, slowly.", 2))
    model.add_rule({"last_user_contains": "BETA"}, _slow("Beta answer, slowly.", 2))
    workers = make_workers(1)
    alice, bob = await sync_to_async(make_user)(), await sync_to_async(make_user)()
    async with Browser(gateway, alice) as a_tab, Browser(gateway, bob) as b_tab:
        a_sid = (await a_tab.send("ALPHA please"))["result"]["session_id"]
        b_sid = (await b_tab.send("BETA please"))["result"]["session_id"]
        await _until(lambda: _streaming(model, "ALPHA") and _streaming(model, "BETA"))
        (proc,) = workers.procs
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0  # it exits on its own, cleanly
        await a_tab.turn_status(a_sid, "completed", within=10)
        await b_tab.turn_status(b_sid, "completed", within=10)
        for tab, sid in ((a_tab, a_sid), (b_tab, b_sid)):
            (answer,) = tab.messages(sid, "markdown")
            assert answer["streaming_status"] == "completed"
    assert len(model.requests) == 2
