"""Redis faults (issue 7): Redis is the fast path, never the only copy.

End to end on real processes (Daphne and two workers on a Valkey of this module, the scripted
model, the official centrifuge-python client as the browser): Redis restarted with its data and
empty while turns wait on RTCs, and Redis at ``maxmemory`` with ``noeviction``. Then the pieces
on their own: checkpoint and stop flag after Redis lost them, and the start-up check.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from apps.rtc.models import Rtc
from apps.sessions.models import Message
from apps.turns import state
from apps.turns.models import Turn, TurnCheckpoint
from apps.turns.profiles import profile_for
from apps.turns.prompt import truncate_output
from apps.turns.tokens import count_text
from rtcagent import keys
from rtcagent.redis import get_redis
from tests.livesrv import ROOT, child_env
from tests.sessions.factories import make_session, make_turn
from tests.turns.stack import Browser

pytestmark = [pytest.mark.django_db(transaction=True)]

# Turns waiting on RTCs while Redis restarts; RTC_FAULT_TURNS may lower it (the same code runs).
TURNS = int(os.environ.get("RTC_FAULT_TURNS", "50"))
USERS = min(10, TURNS)  # spread over this many users (one browser each)
BIG_RESULT = 1_200_000  # bytes of a tool result: its checkpoint no longer fits in Redis
HEADROOM = 300_000  # bytes Redis may still take when "full": small writes fit, that one not


def _script(model: Any) -> None:
    model.add_rule({"last_user_contains": "job"}, {"tool_calls": [
        {"name": "read", "arguments": {"path": "/job.txt"}}]})
    model.add_rule({"last_role": "tool"}, {"content": "done"})


async def _start_turns(
    stack: Any, exits: contextlib.AsyncExitStack, model: Any, make_user: Callable[..., Any],
    count: int, users: int,
) -> tuple[list[Browser], list[tuple[Browser, str]]]:
    """``count`` turns over ``users`` browsers (closed with ``exits``), each waiting on its RTC:
    (tabs, [(tab, session id)])."""
    _script(model)
    people = [await sync_to_async(make_user)() for _ in range(users)]
    # the sends all go at once: on SQLite (one writer at a time) the last replies of fifty
    # came after the client's default 5 s once in a loaded CI run (2026-12-07)
    tabs = [await exits.enter_async_context(Browser(stack.web, user, timeout=30.0))
            for user in people]
    sent = await asyncio.gather(*(tabs[i % users].send(f"job {i}") for i in range(count)))
    jobs = [(tabs[i % users], s["result"]["session_id"]) for i, s in enumerate(sent)]
    await _until(lambda: Turn.objects.filter(status="interrupted").count() == count
                 and Rtc.objects.filter(status="pending").count() == count, within=40)
    return tabs, jobs


async def _until(cond: Callable[[], Any], within: float = 30.0) -> Any:
    """Poll a database condition (run in a thread) until it holds."""
    deadline = time.monotonic() + within
    while True:
        value = await sync_to_async(cond)()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the database condition")
        await asyncio.sleep(0.1)


async def _submit(tab: Browser, sid: str, result: str) -> None:
    """Submit the session's pending RTC result like the widget: retried with one client_id."""
    rtc_id = await sync_to_async(
        lambda: str(Rtc.objects.get(session_id=sid, status="pending").id))()
    client_id = str(uuid.uuid4())
    for attempt in range(5):
        try:
            await tab.submit(rtc_id, result, client_id=client_id)
            return
        except Exception:  # the socket dropped with Redis: the client reconnects
            if attempt == 4:
                raise
            await asyncio.sleep(0.5)


def _assert_completed_once(jobs: list[tuple[Browser, str]], results: dict[str, str],
                           model: Any) -> None:
    """Every turn completed; its result reached the model once and was recorded once."""
    sids = [sid for _, sid in jobs]
    assert list(Turn.objects.filter(session_id__in=sids).values_list("status", flat=True)) == [
        "completed"] * len(sids)
    assert not TurnCheckpoint.objects.filter(turn__session_id__in=sids).exists()
    for sid in sids:
        outputs = Message.objects.filter(session_id=sid, content__type="toolcall_output")
        assert [m.content["data"]["output"] for m in outputs] == [results[sid]]
        assert list(Rtc.objects.filter(session_id=sid).values_list("status", flat=True)) == [
            "completed"]
    seen: dict[str, int] = {}
    for request in model.requests:
        for message in request.body["messages"]:
            if message["role"] == "tool":
                seen[message["content"]] = seen.get(message["content"], 0) + 1
    # the model is sent each result once, cut to the tool-result budget (the message keeps it all)
    budget = profile_for().tool_result_budget
    assert seen == {truncate_output(r, budget, count_text): 1 for r in results.values()}
    assert len(model.requests) == 2 * len(sids)


# --- end to end -------------------------------------------------------------------------------


async def test_restart_with_data_resumes_every_waiting_turn(redis_stack, model, make_user):
    async with contextlib.AsyncExitStack() as exits:
        tabs, jobs = await _start_turns(redis_stack, exits, model, make_user, TURNS, USERS)
        epochs = {tab.user.id: _epoch(redis_stack, tab.user.id) for tab in tabs}

        redis_stack.valkey.restart(keep_data=True)  # SHUTDOWN SAVE, same port, same folder

        assert {uid: _epoch(redis_stack, uid) for uid in epochs} == epochs
        results = {sid: f"contents of job {i}" for i, (_, sid) in enumerate(jobs)}
        await asyncio.gather(*(_submit(tab, sid, results[sid]) for tab, sid in jobs))
        await _until(lambda: Turn.objects.filter(status="completed").count() == TURNS)
        await sync_to_async(_assert_completed_once)(jobs, results, model)
        for tab in tabs:  # a client that reconnected recovered: nobody had to reload
            topic = tab.rec.subscribed(f"topic:u={tab.user.id}")
            assert all(s.recovered for s in topic if s.was_recovering)


async def test_restart_empty_resumes_from_postgresql_and_clients_reload(
    redis_stack, model, make_user
):
    async with contextlib.AsyncExitStack() as exits:
        tabs, jobs = await _start_turns(redis_stack, exits, model, make_user, TURNS, USERS)
        old_epochs = {tab.user.id: _epoch(redis_stack, tab.user.id) for tab in tabs}
        results = {sid: f"contents of job {i}" for i, (_, sid) in enumerate(jobs)}
        before, after = jobs[: len(jobs) // 2], jobs[len(jobs) // 2:]
        # The first half's results arrive while no worker runs: their resume items are in
        # Redis only (the queue's key names), and vanish with it.
        redis_stack.pause_workers()
        await asyncio.gather(*(_submit(tab, sid, results[sid]) for tab, sid in before))
        assert len(redis_stack.valkey.client().keys("rtc:q:*resume*")) == len(before)

        redis_stack.valkey.restart(keep_data=False)

        # No checkpoint, queue item or old epoch left. Not "the database is empty": the web
        # process runs on, and its heartbeat, or a client reconnecting at once (a new epoch),
        # may write before this line runs.
        r = redis_stack.valkey.client()
        assert r.keys("rtc:turn:*") == [] and r.keys("rtc:q:*") == []
        assert not {uid for uid, old in old_epochs.items() if _epoch(redis_stack, uid) == old}
        redis_stack.resume_workers()
        await asyncio.gather(*(_submit(tab, sid, results[sid]) for tab, sid in after))
        await _until(lambda: Turn.objects.filter(status="completed").count() == TURNS)
        await sync_to_async(_assert_completed_once)(jobs, results, model)

        for tab in tabs:  # each connected client was told to reload: a new epoch
            # (after a 3010 from the epoch check, or a socket the restart dropped: either
            # way its reconnect asks to recover the old epoch and is refused)
            topic = f"topic:u={tab.user.id}"
            await tab.rec.wait_for(lambda t=topic, tab=tab: any(
                s.was_recovering and not s.recovered for s in tab.rec.subscribed(t)))
            fresh = [s for s in tab.rec.subscribed(topic) if s.was_recovering][-1]
            assert fresh.stream_position.epoch == _epoch(redis_stack, tab.user.id)
            assert fresh.stream_position.epoch != old_epochs[tab.user.id]


def _epoch(stack: Any, user_id: int) -> str:
    return str(stack.valkey.client().get(keys.topic_epoch(user_id)))


async def test_full_redis_refuses_the_checkpoint_loudly_and_the_turn_resumes(
    redis_stack, model, make_user
):
    """The result's checkpoint is first saved with the next call's RTC (engine): that save,
    carrying a result too large for what Redis has left, is refused loudly; the turn stays
    running with its checkpoint in PostgreSQL, the sweeper moves it on from there, and once
    Redis has room again it ends as if nothing happened."""
    async with contextlib.AsyncExitStack() as exits:
        _, jobs = await _start_turns(redis_stack, exits, model, make_user, 1, 1)
        ((tab, sid),) = jobs
        model.reset()  # what the model answers to the big result: one more call
        # answered after a pause: the submit's Update carries the big result through Redis
        # (the topic's bell), and until the web process has read it, that publication's
        # buffer counts as Redis memory, over the limit set below; the answer's writes come
        # once it has drained (a quicker worker otherwise met a Redis full for every write)
        model.add_rule({"last_tool_result_contains": "yyyy"}, {"tool_calls": [
            {"name": "read", "arguments": {"path": "/next.txt"}}], "chunk_delay": 0.3})
        model.add_rule({"last_role": "tool"}, {"content": "done"})
        r = redis_stack.valkey.client()
        fillers = [f"test:filler:{i}" for i in range(200)]
        for name in fillers:  # stored state an evicting policy would drop to make room
            r.set(name, "x" * 1000)
        # Full: small writes still fit, the checkpoint carrying a large tool result does not.
        r.config_set("maxmemory", int(r.info("memory")["used_memory"]) + HEADROOM)

        big = "y" * BIG_RESULT
        await _submit(tab, sid, big)
        turn_id = await sync_to_async(lambda: str(Turn.objects.get(session_id=sid).id))()
        loud = f"ERROR apps.turns.state checkpoint of turn {turn_id} NOT written to Redis"
        deadline = time.monotonic() + 30
        while loud not in redis_stack.workers.output():
            assert time.monotonic() < deadline, redis_stack.workers.output()[-3000:]
            await asyncio.sleep(0.1)
        assert "OutOfMemoryError" in redis_stack.workers.output()

        await asyncio.sleep(2 * 1.5)  # the sweeper retries meanwhile (RTC_ORPHAN_AFTER 1.5 s)
        turn = await sync_to_async(Turn.objects.get)(pk=turn_id)
        assert turn.status == "running"  # paused, not failed
        saved = await sync_to_async(lambda: TurnCheckpoint.objects.get(turn_id=turn_id).data)()
        assert [m["content"] for m in saved["transcript"] + saved["results"]
                if m["role"] == "tool"] == [big]
        second = await sync_to_async(
            lambda: Rtc.objects.get(session_id=sid, status="pending"))()
        assert saved["waiting_rtc"] == str(second.id)  # committed with its checkpoint
        assert r.info("stats")["evicted_keys"] == 0
        assert r.exists(*fillers) == len(fillers)
        assert len(model.requests) == 1  # the model waits for Redis before the next request

        r.config_set("maxmemory", 0)  # memory is available again
        await _until(lambda: Turn.objects.get(pk=turn_id).status == "interrupted", within=20)
        await _submit(tab, sid, "next contents")

        await _until(lambda: Turn.objects.get(pk=turn_id).status == "completed", within=20)
        assert not await sync_to_async(
            TurnCheckpoint.objects.filter(turn_id=turn_id).exists)()
        outputs = await sync_to_async(lambda: [m.content["data"]["output"] for m in
                                               Message.objects.filter(
                                                   session_id=sid,
                                                   content__type="toolcall_output")])()
        assert outputs == [big, "next contents"]  # each result recorded once
        statuses = await sync_to_async(
            lambda: list(Rtc.objects.filter(session_id=sid).values_list("status", flat=True)))()
        assert statuses == ["completed", "completed"]
        assert len(model.requests) == 2  # the model was asked once per result
        assert r.info("stats")["evicted_keys"] == 0


# --- the pieces -------------------------------------------------------------------------------


def test_a_checkpoint_lost_by_redis_comes_back_from_postgresql(make_user) -> None:
    turn = make_turn(make_session(make_user()), status="interrupted")
    tid = str(turn.id)
    state.checkpoint_save(tid, {"step": 2, "waiting_rtc": "r-1"})
    get_redis().flushdb()  # what an empty restart leaves

    assert state.checkpoint_load(tid) == {"step": 2, "waiting_rtc": "r-1"}
    assert get_redis().get(f"rtc:turn:{{{tid}}}:checkpoint")  # Redis warmed again

    state.checkpoint_delete(tid)
    assert state.checkpoint_load(tid) is None  # gone everywhere: the turn state is lost
    assert not TurnCheckpoint.objects.filter(turn_id=tid).exists()


def test_a_stop_requested_before_redis_lost_it_still_stops_the_turn(make_user) -> None:
    turn = make_turn(make_session(make_user()), status="running")
    tid = str(turn.id)
    state.checkpoint_save(tid, {"step": 1})
    assert state.stop_requested(tid) is False
    state.request_stop(tid)
    get_redis().flushdb()

    assert state.stop_requested(tid) is True  # from PostgreSQL; Redis has its flag again
    assert get_redis().exists(f"rtc:turn:{{{tid}}}:stop")
    state.checkpoint_load(tid)  # Redis has the turn's checkpoint again...
    get_redis().delete(f"rtc:turn:{{{tid}}}:stop")  # ...but lost the flag (a restart with data)
    assert state.stop_requested(tid) is False  # the poll stays on Redis while it has the turn
    assert state.stop_requested(tid, durable=True) is True  # the check after a park does not
    assert get_redis().exists(f"rtc:turn:{{{tid}}}:stop")


def test_evicting_redis_is_flagged_by_check_and_refused_by_the_worker(valkey) -> None:
    evicting, sound = valkey(maxmemory_policy="allkeys-lru"), valkey()
    env = child_env(REDIS_URL=evicting.url)
    prod = {**env, "DJANGO_DEBUG": "False", "DJANGO_SECRET_KEY": "k" * 50,
            "DJANGO_ALLOWED_HOSTS": "example.com"}

    def manage(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    runs = {  # together: each is a Django start-up of about 2 s
        "check": manage("check", env=env),
        "deploy": manage("check", "--deploy", env=prod),
        "worker": manage("rtc_worker", env=env),
        "sound": manage("check", env=child_env(REDIS_URL=sound.url)),
    }
    out = {name: proc.communicate(timeout=60)[0] for name, proc in runs.items()}
    codes = {name: proc.returncode for name, proc in runs.items()}
    assert codes == {"check": 0, "deploy": 1, "worker": 1, "sound": 0}, out
    assert "turns.W001" in out["check"] and "allkeys-lru" in out["check"], out["check"]
    assert "turns.E001" in out["deploy"], out["deploy"]
    assert "refusing to start" in out["worker"] and "noeviction" in out["worker"], out["worker"]
    assert "turns." not in out["sound"], out["sound"]
    assert evicting.client().dbsize() == 0  # the refused worker wrote nothing
