"""End-to-end stack for engine tests: Daphne + worker processes + the scripted LLM + a browser.

The browser is the official centrifuge-python client; it keeps every topic Update it receives
and reacts to RTCs the way the widget does (through ``v1.rtc.*`` RPCs).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from centrifuge import Client

from apps.accounts.tokens import issue_access_token
from tests.gateway.conftest import Recorder
from tests.livesrv import ROOT, LiveServer, child_env

WORKER_ENV = {
    "OPENAI_API_KEY": "sk-test-key",
    "RTC_MODEL": "scripted-model",
    "RTC_WORKER_LEASE_MS": "2000",
    "RTC_ORPHAN_AFTER": "1.5",
    "RTC_LLM_MAX_ATTEMPTS": "2",
    "RTC_LLM_TIMEOUT": "5",
}


@dataclass
class Workers:
    log_dir: Path
    base_url: str
    extra: dict[str, str] = field(default_factory=dict)
    procs: list[subprocess.Popen[Any]] = field(default_factory=list)
    turns: int | None = None  # turns each process runs at once (None: the default, 4)

    def start(self, count: int = 1) -> None:
        for _ in range(count):
            n = len(self.procs)
            log = (self.log_dir / f"worker-{n}.log").open("wb")
            env = child_env(**{**WORKER_ENV, "OPENAI_BASE_URL": self.base_url, **self.extra})
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "manage.py", "rtc_worker",
                     *(["--turns", str(self.turns)] if self.turns else [])], cwd=ROOT, env=env,
                    stdout=log, stderr=subprocess.STDOUT,
                )
            )

    def kill(self, index: int | None = None) -> None:
        """kill -9: no clean-up of any kind."""
        for proc in self.procs if index is None else [self.procs[index]]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()

    def output(self) -> str:
        logs = sorted(self.log_dir.glob("worker-*.log"))
        return "\n".join(p.read_text(errors="replace") for p in logs)


class Browser:
    """A user's tab: the official client plus the entity state rebuilt from Updates."""

    def __init__(self, server: LiveServer, user: Any, *, timeout: float = 5.0) -> None:
        self.user = user
        self.rec = Recorder()
        self.client = Client(
            server.ws_url, events=self.rec, token=issue_access_token(user), proxy=None,
            timeout=timeout,  # the client's default, a reply's wait
        )
        self.entities: dict[tuple[str, str], dict[str, Any]] = {}
        self.updates: list[dict[str, Any]] = []
        self._seen = 0

    async def __aenter__(self) -> Browser:
        await self.client.connect()
        await self.rec.wait_for(lambda: len(self.rec.of("subscribed")) >= 2)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.disconnect()

    def _absorb(self) -> None:
        topic = f"topic:u={self.user.id}"
        pubs = self.rec.publications.get(topic, [])
        for pub in pubs[self._seen:]:
            data = pub.data
            if data.get("type") == "gap":
                continue
            self.updates.append(data)
            for it, entity in zip(data["items"], data["data_list"], strict=False):
                self.entities[(it["entity"], it["entity_id"])] = entity
        self._seen = len(pubs)

    def all(self, entity: str) -> list[dict[str, Any]]:
        self._absorb()
        return [v for (kind, _), v in self.entities.items() if kind == entity]

    async def until(self, cond: Any, within: float = 20.0) -> Any:
        """Wait until ``cond()`` (evaluated on fresh state) is truthy; return its value."""
        deadline = time.monotonic() + within
        while True:
            self._absorb()
            value = cond()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; entities: {self.entities}")
            await asyncio.sleep(0.05)

    async def rpc(self, method: str, data: dict[str, Any]) -> Any:
        return (await self.client.rpc(method, data)).data

    async def send(self, text: str, session_id: str = "", **extra: Any) -> dict[str, Any]:
        return await self.rpc("v1.message.send", {
            "content_data": {"type": "user_message", "data": {"text": text}},
            "client_id": extra.pop("client_id", str(uuid.uuid4())),
            "client_session_id": "cs-" + uuid.uuid4().hex[:8],
            "server_session_id": session_id,
            **extra,
        })

    def turns(self, session_id: str) -> list[dict[str, Any]]:
        return [t for t in self.all("turn") if t["session_id"] == session_id]

    def rtcs(self, session_id: str, status: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.all("rtc") if r["session_id"] == session_id
                and (status is None or r["status"] == status)]

    def messages(self, session_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        rows = [m for m in self.all("message") if m["session_id"] == session_id]
        rows.sort(key=lambda m: m["global_offset"])
        return [m for m in rows if kind is None or m["content"]["type"] == kind]

    async def turn_status(self, session_id: str, *statuses: str, within: float = 20.0) -> dict:
        return await self.until(
            lambda: next((t for t in self.turns(session_id) if t["status"] in statuses), None),
            within,
        )

    async def pending_rtc(self, session_id: str, within: float = 20.0) -> dict[str, Any]:
        return await self.until(lambda: next(iter(self.rtcs(session_id, "pending")), None), within)

    async def submit(self, rtc_id: str, result: Any, *, success: bool = True,
                     client_id: str | None = None) -> Any:
        body: dict[str, Any] = {"rtc_id": rtc_id, "success": success,
                                "client_id": client_id or str(uuid.uuid4())}
        body["result" if success else "error"] = result
        return await self.rpc("v1.rtc.submit_result", body)


def in_process_worker(llm: Any) -> Any:
    """A worker of this process (no turn threads) on the scripted model; the test runs its
    queue items itself (``run_item``)."""
    from apps.turns.llm import OpenAIChat
    from apps.turns.worker import Worker

    return Worker(llm_factory=lambda: OpenAIChat(api_key=llm.api_key or "k", base_url=llm.base_url),
                  turns=1)


def run_item(worker: Any, *, keep: bool = False, take: bool = False
             ) -> tuple[Any, dict[str, Any]]:
    """What a turn thread does with one item: claim the next session, take, handle, ack; the
    hold, which is let go unless ``keep`` (the test then looks at what is left in it), and the
    item. ``take``: the claim takes the item too, as a turn thread's does."""
    from apps.turns import queue

    hold = queue.claim(lease_ms=30000, take=take)
    assert hold is not None
    work = hold.take()
    assert work is not None
    worker._hold = hold
    try:
        worker.handle(hold.session_id, work)
    finally:
        worker._hold = None
    hold.ack()
    if not keep:
        hold.yield_session()
    return hold, work
