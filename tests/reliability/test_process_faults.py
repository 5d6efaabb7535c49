"""Process kills (issue 7): every web and worker process SIGKILLed while the browser keeps
retrying, and the worker SIGKILLed between a tool result and the turn's resume.

End to end on real processes of each test (a Daphne and workers on the test database and Redis,
the scripted model) with the official centrifuge-python client as the browser and a Python twin
of the widget's outbox (``Outbox``). What must hold after any of these faults:

* the turn completes exactly once; each tool call has one RTC, asked once (one ``rtc.created``),
  whose result is applied once (statuses ``pending -> completed`` on the topic, the model sees
  each result once); a retried submission is answered ``duplicate: true`` and changes nothing;
* the client that reconnected with its last offset and epoch got every Update once, in order
  (offsets 1, 2, 3 ... with no gap or repeat), the same publications as ``history`` from the
  start, and the state they build equals fresh RPC queries (``assert_replay_matches``).

The kill tests of ``tests/turns/test_e2e_failures.py`` (one worker while streaming or while an
RTC waits, the web process while an RTC waits) are not repeated here.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from asgiref.sync import sync_to_async
from centrifuge import Client, ClientState, ReplyError
from psycopg import sql as pgsql

from apps.accounts.tokens import issue_access_token
from apps.gateway import stream
from apps.rtc.models import Rtc
from apps.sessions.models import Message
from apps.turns.models import Turn
from tests import livesrv
from tests.livesrv import LiveServer, start_daphne
from tests.turns.stack import Browser, Workers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WEB_ENV = {"RTC_PING_INTERVAL": "2", "RTC_PONG_TIMEOUT": "1", "RTC_REORDER_WAIT": "0.3",
           "RTC_GAP_GRACE": "1"}
FINAL = "Both files are looked at: a.md is listed and says hello. " * 3


# --- the browser: a tab that reconnects quickly, and the widget's outbox ------------------------


class Tab(Browser):
    """``Browser`` with reconnects at most 0.5 s apart (the official client's default backs off
    to 20 s, longer than a test should wait for a restarted server)."""

    def __init__(self, server: LiveServer, user: Any, **client: Any) -> None:
        super().__init__(server, user)
        self.client = Client(server.ws_url, events=self.rec, token=issue_access_token(user),
                             proxy=None, max_reconnect_delay=0.5, **client)


class Refused(Exception):
    """A refusal that can never succeed (the outbox drops the entry)."""


@dataclass
class Outbox:
    """``static/rtc-agent/lib/outbox.js`` in Python: one ``client_id`` per result; over the socket
    when it is connected, else ``POST /api/rtc/<id>/result``; retried until acknowledged (a
    duplicate answer counts); only ``PERMANENT`` refusals give up. Backoff 0.1 s doubling to 1 s
    (the widget's 1 s to 30 s, scaled down). ``paused`` holds attempts without losing them, like
    the widget's flag."""

    PERMANENT = frozenset({"rtc.not_found", "permission_denied", "invalid_request"})

    tab: Tab
    http_url: str
    rpc_timeout: float = 2.0
    paused: bool = False
    attempts: list[tuple[str, str]] = field(default_factory=list)  # (transport, outcome)

    async def deliver(self, rtc_id: str, body: dict[str, Any]) -> dict[str, Any]:
        failures = 0
        while True:
            if self.paused:
                await asyncio.sleep(0.05)
                continue
            transport = "ws" if self.tab.client.state == ClientState.CONNECTED else "http"
            try:
                if transport == "ws":
                    reply = await self.tab.client.rpc(
                        "v1.rtc.submit_result", {"rtc_id": rtc_id, **body},
                        timeout=self.rpc_timeout)
                    data: dict[str, Any] = reply.data
                else:
                    data = await asyncio.to_thread(self._post, rtc_id, body)
            except ReplyError as exc:
                if exc.message.split(":")[0] in self.PERMANENT:
                    raise Refused(exc.message) from exc
                outcome = f"error {exc.code}{' temporary' if exc.temporary else ''}"
            except Refused:
                raise
            except Exception as exc:  # timeout, socket closed, connection refused
                outcome = type(exc).__name__
            else:
                self.attempts.append((transport, "ok"))
                return data
            self.attempts.append((transport, outcome))
            failures += 1
            await asyncio.sleep(min(1.0, 0.1 * 2 ** (failures - 1)))

    def _post(self, rtc_id: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(  # noqa: S310 - http://127.0.0.1
            f"{self.http_url}/api/rtc/{rtc_id}/result", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json",
                     "Authorization": f"Bearer {issue_access_token(self.tab.user)}"})
        try:
            with urllib.request.urlopen(request, timeout=self.rpc_timeout) as response:  # noqa: S310
                return dict(json.loads(response.read()))
        except urllib.error.HTTPError as exc:
            code = json.loads(exc.read() or b"{}").get("code", "")
            if exc.code < 500 and code in self.PERMANENT:
                raise Refused(code) from exc
            raise


# --- checks ------------------------------------------------------------------------------------


async def settled_position(user_id: int, within: float = 15.0) -> int:
    """Wait until every allocated topic offset is committed or filled with a gap."""
    deadline = time.monotonic() + within
    while True:
        pos = await sync_to_async(stream.position)(user_id)
        if pos.watermark == pos.offset:
            return pos.offset
        assert time.monotonic() < deadline, f"topic never settled: {pos}"
        await asyncio.sleep(0.1)


async def _list_all(tab: Browser, method: str, session_id: str) -> list[dict[str, Any]]:
    page = await tab.rpc(method, {"session_id": session_id, "limit": 200})
    assert not page["next_cursor"], "one page holds the test's entities"
    return list(page["items"])


async def assert_replay_matches(tab: Browser, session_ids: list[str]) -> None:
    """Every Update reached ``tab`` once and in order, across its reconnects; the durable log
    (``history`` from the start) holds exactly those; their state equals fresh RPC queries."""
    topic = f"topic:u={tab.user.id}"
    last = await settled_position(tab.user.id)
    await tab.rec.wait_for(lambda: len(tab.rec.publications.get(topic, [])) >= last, within=15)
    pubs = tab.rec.publications[topic]  # live: a trailing Update may still arrive
    assert [p.offset for p in list(pubs)] == list(range(1, len(pubs) + 1))
    reconnects = [s for s in tab.rec.subscribed(topic) if s.was_recovering]
    assert all(s.recovered for s in reconnects), "a reconnect had to reload"
    history = await tab.client.history(topic, limit=-1)
    assert history.offset >= last
    await tab.rec.wait_for(lambda: len(pubs) >= history.offset, within=15)
    received = list(pubs)
    assert [p.offset for p in received] == list(range(1, len(received) + 1))
    assert [(p.offset, p.data) for p in history.publications] == [
        (p.offset, p.data) for p in received[:history.offset]]
    tab.all("session")  # absorb what arrived
    for sid in session_ids:
        fresh = (await tab.rpc("v1.session.get", {"session_id": sid}))["item"]
        assert tab.entities[("session", sid)] == fresh
        for entity in ("message", "turn", "rtc"):
            rows = await _list_all(tab, f"v1.{entity}.list", sid)
            replayed = {v["id"]: v for v in tab.all(entity) if v["session_id"] == sid}
            assert replayed == {v["id"]: v for v in rows}, entity


def stream_history(tab: Browser, entity: str) -> dict[str, list[str]]:
    """Per entity id, the statuses its snapshots went through on the topic, in order
    (``+output`` once an RTC's ``toolcall_output`` message is linked)."""
    seen: dict[str, list[str]] = {}
    tab.all(entity)
    for update in tab.updates:
        for it, data in zip(update["items"], update["data_list"], strict=True):
            if it["entity"] == entity:
                linked = "+output" if data.get("output_message_id") else ""
                seen.setdefault(it["entity_id"], []).append(
                    f"{it['action']}:{data.get('status', '')}{linked}")
    return seen


def ledger(session_id: str) -> dict[str, Any]:
    """What PostgreSQL holds for the session."""
    messages = Message.objects.filter(session_id=session_id)
    return {
        "turns": list(Turn.objects.filter(session_id=session_id).values_list("status", flat=True)),
        "rtcs": list(Rtc.objects.filter(session_id=session_id).order_by("offset")
                     .values_list("tool_call_id", "status", "client_id", "result")),
        "kinds": Counter(m.content["type"] for m in messages),
        "keys_unique": messages.count() == messages.values("client_id").distinct().count(),
    }


def tool_results_seen(model: Any) -> list[list[tuple[str, str]]]:
    """The tool results of each model request, as (call id, content)."""
    return [[(m["tool_call_id"], m["content"]) for m in r.body["messages"] if m["role"] == "tool"]
            for r in model.requests]


# --- the processes -----------------------------------------------------------------------------


@dataclass
class Deployment:
    """A Daphne and workers of one test on the test database and Redis: all of them can be
    SIGKILLed at once and started again (Daphne on the same port)."""

    log_dir: Path
    workers: Workers
    web: LiveServer | None = None

    def start(self, workers: int = 2) -> None:
        self.workers.start(workers)
        self.web = start_daphne(self.log_dir, port=self.web.port if self.web else 0, **WEB_ENV)

    def kill_all(self) -> None:
        """kill -9 of every process at once: no clean-up of any kind."""
        procs = [p for p in [*self.workers.procs, self.web and self.web.proc] if p is not None]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in procs:
            proc.wait(10)

    def stop(self) -> None:
        self.workers.kill()
        if self.web is not None:
            self.web.proc.kill()
            self.web.proc.wait(10)


@pytest.fixture
def deployment(llm: Any, tmp_path: Path) -> Iterator[Deployment]:
    made = Deployment(tmp_path, Workers(tmp_path, llm.base_url, {"RTC_GAP_GRACE": "1"}))
    yield made
    made.stop()


@contextmanager
def row_lock(rtc_id: str) -> Iterator[Any]:
    """Hold ``FOR UPDATE`` on the RTC's row from a connection of the test: a submission's
    conditional UPDATE waits on it inside PostgreSQL. Yields ``waiters()``, the number of
    backends blocked by the lock."""
    with psycopg.connect(livesrv.test_database_url()) as conn, psycopg.connect(
        livesrv.test_database_url(), autocommit=True
    ) as probe:
        table = pgsql.Identifier(Rtc._meta.db_table)
        conn.execute(pgsql.SQL("SELECT 1 FROM {} WHERE id = %s FOR UPDATE").format(table),
                     [rtc_id])
        pid = conn.info.backend_pid

        def waiters() -> int:
            row = probe.execute("SELECT count(*) FROM pg_stat_activity "
                                "WHERE %s = ANY(pg_blocking_pids(pid))", [pid]).fetchone()
            return int(row[0]) if row else 0

        try:
            yield waiters
        finally:
            conn.rollback()


async def poll_until(cond: Any, what: str, within: float = 30.0) -> Any:
    """Wait until ``cond()`` (run in a thread: it may query a database) is truthy."""
    deadline = time.monotonic() + within
    while not (value := await sync_to_async(cond)()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
    return value


def _rtc_status(rtc_id: str) -> str:
    return str(Rtc.objects.get(pk=rtc_id).status)


def _script_two_tools(model: Any) -> None:
    model.add_rule({"last_user_contains": "survey"}, {"tool_calls": [
        {"id": "c1", "name": "ls", "arguments": {"path": "/"}},
        {"id": "c2", "name": "read", "arguments": {"path": "/a.md"}}]})
    model.add_rule({"last_role": "tool"}, {"content": FINAL, "chunk_size": 8})


# --- every process killed while the browser retries --------------------------------------------


@pytest.mark.skipif(not livesrv.test_database_url().startswith("postgres"),
                    reason="holds the submission inside PostgreSQL (a row lock, pg_blocking_pids)")
@pytest.mark.parametrize("fault", ["rolled_back", "reply_lost"])
async def test_every_process_killed_while_the_browser_submits(
    fault: str, deployment: Deployment, model: Any, make_user: Any
) -> None:
    """``rolled_back``: the kill lands while the submission waits inside PostgreSQL (its
    transaction dies with Daphne). ``reply_lost``: the submission committed but its reply never
    reached the browser, which gave up waiting; then everything is killed. Either way the outbox
    keeps retrying (HTTP while the socket is down) with one ``client_id`` until new processes
    answer."""
    _script_two_tools(model)
    deployment.start(workers=2)
    assert deployment.web is not None
    user = await sync_to_async(make_user)()
    async with Tab(deployment.web, user) as tab:
        outbox = Outbox(tab, deployment.web.http_url, rpc_timeout=1.0)
        sid = (await tab.send("survey the files"))["result"]["session_id"]
        rtc1 = await tab.pending_rtc(sid)
        await tab.turn_status(sid, "interrupted")
        first = {"success": True, "result": "a.md", "client_id": "k-" + uuid.uuid4().hex}

        with row_lock(rtc1["id"]) as waiters:
            delivery = asyncio.create_task(outbox.deliver(rtc1["id"], first))
            await poll_until(waiters, "the submission to wait on the row lock")
            if fault == "rolled_back":
                deployment.kill_all()
            else:  # the attempt in flight goes on; the next one waits
                outbox.paused = True
                await poll_until(lambda: outbox.attempts, "the browser to give up waiting")
        if fault == "rolled_back":  # the lock is gone: Daphne's transaction is not coming back
            await asyncio.sleep(0.3)
            assert await sync_to_async(_rtc_status)(rtc1["id"]) == "pending"
        else:
            await poll_until(lambda: _rtc_status(rtc1["id"]) == "completed", "the commit")
            deployment.kill_all()
            outbox.paused = False
        await tab.rec.wait_for(lambda: tab.client.state != ClientState.CONNECTED)
        await poll_until(lambda: sum(t == "http" for t, _ in outbox.attempts) >= 2,
                    "the outbox to retry over HTTP while nothing answers")
        assert not delivery.done()

        # New processes may take a while for their first request (connections, imports, turn
        # threads): an attempt the browser gave up on would commit all the same and make the
        # next one a duplicate. Nothing answers now, so a longer wait changes nothing before.
        outbox.rpc_timeout = 15.0
        deployment.start(workers=2)
        reply = await asyncio.wait_for(delivery, 30)
        assert reply["result"]["duplicate"] is (fault == "reply_lost")
        assert len(reply["updates"]) == (0 if fault == "reply_lost" else 1)
        assert reply["result"]["rtc"]["status"] == "completed"

        rtc2 = await tab.until(lambda: next(
            (r for r in tab.rtcs(sid, "pending") if r["tool_call_id"] == "c2"), None), 30)
        second = {"success": True, "result": "hello", "client_id": "k-" + uuid.uuid4().hex}
        assert (await outbox.deliver(rtc2["id"], second))["result"]["duplicate"] is False
        await tab.turn_status(sid, "completed", within=30)
        for rtc, body in ((rtc1, first), (rtc2, second)):  # a late retry of each changes nothing
            late = await tab.submit(rtc["id"], body["result"], client_id=body["client_id"])
            assert late["result"]["duplicate"] is True and late["updates"] == []

        await assert_replay_matches(tab, [sid])
        assert [s.recovered for s in tab.rec.subscribed(f"topic:u={user.id}")
                if s.was_recovering] == [True]  # reconnected once, with recovery
        (turn,) = stream_history(tab, "turn").values()
        assert turn[-1] == "updated:completed" and turn.count("updated:completed") == 1
        assert stream_history(tab, "rtc") == {
            rtc1["id"]: ["created:pending", "updated:completed+output"],
            rtc2["id"]: ["created:pending", "updated:completed+output"],
        }
    held = await sync_to_async(ledger)(sid)
    assert held == {
        "turns": ["completed"],
        "rtcs": [("c1", "completed", first["client_id"], "a.md"),
                 ("c2", "completed", second["client_id"], "hello")],
        "kinds": Counter(user_message=1, toolcall_input=2, toolcall_output=2, markdown=1),
        "keys_unique": True,
    }
    assert tool_results_seen(model) == [[], [("c1", "a.md"), ("c2", "hello")]]
    assert next(m for m in tab.messages(sid, "markdown"))["content"]["data"] == FINAL


# --- the worker killed between a result and its resume ------------------------------------------


async def test_worker_killed_between_a_result_and_its_resume(
    deployment: Deployment, model: Any, make_user: Any
) -> None:
    """The result is committed (with its output's message) and the resume has begun (the turn
    running) but the model has not answered: the resumed request is held by the scripted model
    (``hang``) and the worker is SIGKILLed. Its lease runs out, the sweep gives the item to a new
    worker, which resumes without recording the output again or asking the browser again."""
    model.add_rule({"last_user_contains": "survey"}, {"tool_calls": [
        {"id": "c1", "name": "ls", "arguments": {"path": "/"}}]})
    model.add_rule({"last_role": "tool"}, {"hang": 10}, times=1)
    model.add_rule({"last_role": "tool"}, {"content": FINAL, "chunk_size": 8})
    deployment.start(workers=1)
    assert deployment.web is not None
    user = await sync_to_async(make_user)()
    async with Tab(deployment.web, user) as tab:
        outbox = Outbox(tab, deployment.web.http_url)
        sid = (await tab.send("survey the files"))["result"]["session_id"]
        rtc = await tab.pending_rtc(sid)
        body = {"success": True, "result": "a.md", "client_id": "k-" + uuid.uuid4().hex}
        assert (await outbox.deliver(rtc["id"], body))["result"]["duplicate"] is False
        await poll_until(lambda: len(model.requests) == 2, "the resumed model request")
        held = await sync_to_async(ledger)(sid)
        assert held["turns"] == ["running"] and held["kinds"]["toolcall_output"] == 1

        deployment.workers.kill()
        deployment.workers.start(1)
        await tab.turn_status(sid, "completed", within=30)
        late = await tab.submit(rtc["id"], "a.md", client_id=body["client_id"])
        assert late["result"]["duplicate"] is True and late["updates"] == []

        await assert_replay_matches(tab, [sid])
        assert stream_history(tab, "rtc") == {
            rtc["id"]: ["created:pending", "updated:completed+output"]}
        (turn,) = stream_history(tab, "turn").values()
        assert turn[-1] == "updated:completed" and turn.count("updated:completed") == 1
    assert await sync_to_async(ledger)(sid) == {
        "turns": ["completed"],
        "rtcs": [("c1", "completed", body["client_id"], "a.md")],
        "kinds": Counter(user_message=1, toolcall_input=1, toolcall_output=1, markdown=1),
        "keys_unique": True,
    }
    requests = model.requests
    assert tool_results_seen(model) == [[], [("c1", "a.md")], [("c1", "a.md")]]
    assert requests[1].body["messages"] == requests[2].body["messages"]  # asked again, same prompt
