"""The production-like stack the harness measures, and the processes of the baselines.

Settings as in production (``DJANGO_DEBUG=False``, PostgreSQL from ``DATABASE_URL``, Redis from
``REDIS_URL``, a shared JWT key folder), the web process started by ``rtcagent.serve`` (uvicorn
unless ``RTC_WEB_SERVER`` says otherwise) and worker processes by ``manage.py rtc_worker`` as in
the Procfile. Servers (the web process, workers, baselines) are pinned to one core and this
process, the load generator, and the scripted model to the other (on a machine with a single
core nothing is pinned).
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORES = sorted(os.sched_getaffinity(0))
SERVER_CORES = {CORES[0]}
LOAD_CORES = {CORES[1]} if len(CORES) > 1 else {CORES[0]}
LOG_DIR = Path(tempfile.mkdtemp(prefix="rtc-bench-"))


def configure_env() -> dict[str, str]:
    """Production-like settings for this process and its children (call before Django)."""
    if not os.environ.get("DATABASE_URL", "").startswith("postgres") and not os.environ.get(
        "BENCH_ALLOW_SQLITE"
    ):
        raise SystemExit("make bench needs PostgreSQL: set DATABASE_URL=postgres://... "
                         "and REDIS_URL=redis://... (see docs/performance.md)")
    if not os.environ.get("REDIS_URL"):
        raise SystemExit("make bench needs Redis: set REDIS_URL=redis://...")
    os.environ.setdefault("RTC_JWT_KEY_DIR", str(ROOT / "var" / "bench-keys"))
    Path(os.environ["RTC_JWT_KEY_DIR"]).mkdir(parents=True, exist_ok=True)
    os.environ.update(
        DJANGO_SETTINGS_MODULE="rtcagent.settings",
        DJANGO_DEBUG="False",
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        DJANGO_SECURE_SSL_REDIRECT="False",
        PYTHONPATH=str(ROOT),
    )
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    return dict(os.environ)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pin(cores: set[int]) -> Any:
    return lambda: os.sched_setaffinity(0, cores)


@dataclass
class Proc:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    port: int = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def spawn(name: str, argv: list[str], *, cores: set[int], port: int = 0,
          env: dict[str, str] | None = None) -> Proc:
    """Start ``argv`` pinned to ``cores`` (``wait_ready`` waits for its port)."""
    log = LOG_DIR / f"{name}.log"
    proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **(env or {})},  # noqa: S603
                            stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            preexec_fn=_pin(cores))
    return Proc(name, proc, log, port)


def wait_ready(procs: list[Proc], within: float = 90) -> None:
    """Return once every process with a port accepts connections; raise with its log if one
    exits or is not listening in time."""
    deadline = time.monotonic() + within
    for p in procs:
        while p.port:
            if p.proc.poll() is not None:
                raise RuntimeError(f"{p.name} exited:\n{p.log.read_text(errors='replace')[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", p.port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{p.name} did not start:\n{p.log.read_text()[-3000:]}") from None
                time.sleep(0.05)


@dataclass
class Stack:
    """Ours: the web process + workers; plus the scripted model and the bare baselines."""

    workers: int = 2
    turns: int = 16  # RTC_WORKER_TURNS of each worker (see docs/performance.md)
    ping: float = 25.0
    procs: list[Proc] = field(default_factory=list)
    web: Proc | None = None
    llm: Proc | None = None
    workers_procs: list[Proc] = field(default_factory=list)
    bare: dict[str, Proc] = field(default_factory=dict)

    @property
    def llm_url(self) -> str:
        assert self.llm is not None
        return f"http://127.0.0.1:{self.llm.port}/v1"

    @property
    def ws_url(self) -> str:
        assert self.web is not None
        return f"ws://127.0.0.1:{self.web.port}/connection/websocket"

    def bare_url(self, kind: str) -> str:
        return f"ws://127.0.0.1:{self.bare[kind].port}"

    def start(self) -> None:
        """Start every process at once (imports overlap), then wait until all listen."""
        py = sys.executable
        port = free_port()
        self.llm = spawn("llm", [py, "-m", "bench.llm", "--port", str(port)],
                         cores=LOAD_CORES, port=port)
        self.procs.append(self.llm)
        model = {"OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": self.llm_url,
                 "RTC_MODEL": "scripted-model", "RTC_PING_INTERVAL": str(self.ping)}
        port = free_port()
        self.web = spawn("web", [py, "-m", "rtcagent.serve", "-b", "127.0.0.1", "-p",
                                 str(port)], cores=SERVER_CORES, port=port, env=model)
        self.procs.append(self.web)
        for n in range(self.workers):
            w = spawn(f"worker-{n}", [py, "manage.py", "rtc_worker", "--turns", str(self.turns)],
                      cores=SERVER_CORES, env=model)
            self.workers_procs.append(w)
            self.procs.append(w)
        db = os.environ["DATABASE_URL"]
        kinds = ["echo", "relay", "replay"]
        if db.startswith("postgres"):  # the durable floor writes PostgreSQL only
            kinds.append("floor")
        for kind in kinds:
            port = free_port()
            argv = [py, "-m", "bench.bare", kind, "--port", str(port), "--llm", self.llm_url,
                    "--db", db, "--redis", os.environ["REDIS_URL"], "--ping", str(self.ping)]
            self.bare[kind] = spawn(f"bare-{kind}", argv, cores=SERVER_CORES, port=port)
            self.procs.append(self.bare[kind])
        wait_ready(self.procs)

    def server_pids(self) -> list[int]:
        """Ours on the server core: the web process and the workers."""
        return [p.pid for p in [self.web, *self.workers_procs] if p is not None]

    def stamps(self) -> dict[str, dict[str, int]]:
        """The scripted model's emission stamps since the last call (see ``bench.llm``)."""
        import json

        assert self.llm is not None
        url = f"http://127.0.0.1:{self.llm.port}/__bench__/stamps"
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.loads(resp.read())

    def check_alive(self) -> None:
        for p in self.procs:
            if p.proc.poll() is not None:
                raise RuntimeError(f"{p.name} died:\n{p.log.read_text(errors='replace')[-3000:]}")

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()
