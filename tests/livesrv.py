"""Real servers for tests: Daphne (the ``web`` process) in a subprocess on the test database."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_database_url() -> str:
    """A DATABASE_URL naming the test database pytest-django created."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def child_env(**extra: str) -> dict[str, str]:
    """Environment for a child process sharing this test run's database, Redis and keys."""
    env = dict(os.environ)
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # set for Playwright in the test process only
    env.update(
        DATABASE_URL=test_database_url(),
        REDIS_URL=settings.REDIS_URL,
        RTC_VAR_DIR=str(settings.VAR_DIR),
        RTC_JWT_KEY_DIR=str(settings.RTC_JWT_KEY_DIR),
        DJANGO_SETTINGS_MODULE="rtcagent.settings",
        PYTHONPATH=str(ROOT),
    )
    env.update(extra)
    return env


@dataclass
class LiveServer:
    proc: subprocess.Popen[Any]
    port: int
    log: Path

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/connection/websocket"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def spawn_listening(name: str, argv: list[str], port: int, log: Path,
                    env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` (output to ``log``) and return once it accepts connections on ``port``;
    a child that exits or is not listening within 30 s is killed and its log raised."""
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited:\n" + log.read_text(errors="replace"))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError as exc:
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait(10)
                raise RuntimeError(f"{name} did not start:\n" + log.read_text()) from exc
            time.sleep(0.1)


def start_daphne(log_dir: Path, port: int = 0, **env: str) -> LiveServer:
    port = port or free_port()
    log = log_dir / f"daphne-{port}.log"
    argv = [sys.executable, "-m", "rtcagent.serve", "-b", "127.0.0.1", "-p", str(port)]
    return LiveServer(spawn_listening("daphne", argv, port, log, child_env(**env)), port, log)
