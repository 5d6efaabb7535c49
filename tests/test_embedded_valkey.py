"""The embedded Valkey comes back after a crash: on the same port, with its data, and the clients
of running processes (redis-py, asyncio pools, the channel layer) carry on without a restart."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aredis
from asgiref.sync import sync_to_async
from django.conf import settings
from websockets.asyncio.client import ClientConnection, connect

from apps.accounts.tokens import issue_access_token
from rtcagent import keys
from rtcagent.embedded import ValkeySupervisor, ensure_valkey, recorded_port, stop_valkey
from rtcagent.layer import RedisChannelLayer
from rtcagent.redis import async_pool
from tests.livesrv import ROOT, start_daphne

_started: list[int] = []


@pytest.fixture
def var_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder of its own (never the checkout's var/); every server started in it is stopped."""
    yield tmp_path
    if port := recorded_port(tmp_path):
        with contextlib.suppress(redis.ConnectionError):
            _server_pid(f"redis://127.0.0.1:{port}/0")
    stop_valkey(tmp_path)
    for pid in _started:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _reap(pid)
    _started.clear()


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True, socket_timeout=2)


def _server_pid(url: str) -> int:
    with _client(url) as r:
        pid = int(r.info("server")["process_id"])
    _started.append(pid)
    return pid


def _kill(url: str) -> int:
    """SIGKILL the server behind ``url`` (no shutdown, no save) and wait until it is gone."""
    pid = _server_pid(url)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while True:
        try:
            with _client(url) as r:
                r.ping()
        except redis.ConnectionError:
            _reap(pid)
            return pid
        assert time.monotonic() < deadline, "the killed server still answers"
        time.sleep(0.02)


def _reap(pid: int) -> None:
    """Collect a killed server this process started (else it stays a zombie)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def test_ensure_valkey_restarts_a_killed_server_on_its_port_with_its_data(var_dir: Path) -> None:
    url = ensure_valkey(var_dir)
    port = recorded_port(var_dir)
    client = _client(url)
    # everysec: an acknowledged write is in the append-only file (the kernel's) before the reply
    assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
    client.set("note", "kept")
    killed = _kill(url)

    assert ensure_valkey(var_dir) == url
    assert recorded_port(var_dir) == port
    assert _server_pid(url) != killed
    assert client.get("note") == "kept"  # the client made before the crash reconnects
    client.close()


def test_the_supervisor_restarts_a_killed_server_without_anyone_asking(var_dir: Path) -> None:
    url = ensure_valkey(var_dir)
    client = _client(url)
    client.set("note", "kept")
    supervisor = ValkeySupervisor(var_dir, interval=0.2).start()
    try:
        killed = _kill(url)
        start = time.monotonic()
        while True:
            try:
                value = client.get("note")
                break
            except redis.ConnectionError:
                assert time.monotonic() - start < 5, "not restarted within 5 s"
                time.sleep(0.05)
    finally:
        supervisor.stop()
    assert value == "kept"
    assert time.monotonic() - start < 5
    assert _server_pid(url) != killed
    assert ensure_valkey(var_dir) == url
    client.close()


def test_a_stopped_server_is_not_restarted_by_the_supervisor(var_dir: Path) -> None:
    url = ensure_valkey(var_dir)
    supervisor = ValkeySupervisor(var_dir, interval=0.1).start()
    try:
        _server_pid(url)
        stop_valkey(var_dir)
        time.sleep(0.5)
    finally:
        supervisor.stop()
    assert recorded_port(var_dir) == 0
    with pytest.raises(redis.ConnectionError), _client(url) as r:
        r.ping()


async def test_the_channel_layer_and_async_pools_reconnect_after_a_restart(var_dir: Path) -> None:
    url = ensure_valkey(var_dir)
    layer = RedisChannelLayer(hosts=[{"address": url, "socket_timeout": 30}])
    client = aredis.Redis(connection_pool=async_pool(url, decode_responses=True))
    try:
        await layer.send("probe", {"type": "probe", "n": 1})
        assert (await layer.receive("probe"))["n"] == 1
        await client.set("note", "kept")
        # In threads, as in a running server: the loop sees its connections closed meanwhile.
        await asyncio.to_thread(_kill, url)
        await asyncio.to_thread(ensure_valkey, var_dir)

        await layer.send("probe", {"type": "probe", "n": 2})
        assert (await layer.receive("probe"))["n"] == 2
        assert await client.get("note") == "kept"
    finally:
        await layer.close_pools()
        await client.aclose(close_connection_pool=True)


@pytest.mark.django_db(transaction=True)
async def test_open_websockets_carry_on_across_a_restart(var_dir: Path, make_user) -> None:
    """A web process on the embedded Valkey keeps its sockets, and their channel-layer delivery
    (a user's control messages: here a disconnect), when the server is killed and the
    supervisor brings it back."""
    url = ensure_valkey(var_dir)
    server = start_daphne(var_dir, REDIS_URL=url)
    supervisor = ValkeySupervisor(var_dir, interval=0.2).start()
    prefix = settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"]
    layer = RedisChannelLayer(hosts=[{"address": url}], prefix=prefix)
    try:
        user = await sync_to_async(make_user)()
        ws = await connect(server.ws_url)
        await ws.send(json.dumps({"id": 1, "connect": {"token": issue_access_token(user)}}))
        assert "connect" in (await _lines(ws))[0]

        await asyncio.to_thread(_kill, url)
        await asyncio.sleep(2)  # the supervisor restarts it meanwhile

        await ws.send(json.dumps({"id": 2, "rpc": {"method": "v1.nope"}}))
        seen: list[dict] = []
        while not any(s.get("id") == 2 for s in seen):  # the socket still serves
            seen += await _lines(ws)
        await layer.group_send(keys.user_group(user.id), {
            "type": "user.disconnect", "code": 3000, "reason": "probe"})
        while not any("disconnect" in s.get("push", {}) for s in seen):  # and still hears
            seen += await _lines(ws)
        assert {"push": {"disconnect": {"code": 3000, "reason": "probe"}}} in seen
        await ws.close()
    finally:
        await layer.close_pools()
        supervisor.stop()
        server.stop()
    assert "Traceback" not in server.output()


async def _lines(ws: ClientConnection) -> list[dict]:
    """The lines of the next frame that are not pings; pings are answered (a socket that stops
    answering is closed, and this test wants it open)."""
    while True:
        frame = await asyncio.wait_for(ws.recv(), 10)
        lines = [json.loads(line) for line in str(frame).split("\n")]
        if {} in lines:
            await ws.send("{}")
        if lines := [line for line in lines if line != {}]:
            return lines


def test_a_test_run_leaves_the_checkouts_valkey_and_var_alone(var_dir: Path) -> None:
    """``make test`` with nothing configured, next to a ``make run`` of the same checkout: the
    run's data survives, and the test run leaves no server, database file or folder behind."""
    tmp = var_dir / "tmp"
    tmp.mkdir()
    url = ensure_valkey(var_dir)  # what make run started
    dev = _client(url)
    dev.set("dev:note", "mine")
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_ALLOW_ASYNC_UNSAFE")}
    env.update(RTC_VAR_DIR=str(var_dir), TMPDIR=str(tmp))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/test_settings.py::test_health_endpoints_report_the_real_services"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout

    assert dev.get("dev:note") == "mine"
    assert dev.dbsize() == 1
    assert [p.name for p in var_dir.iterdir() if p.name.startswith("test")] == []
    # the run's own Valkey (valkey-*) and SQLite folder (rtc-test-*) went with it
    assert [p.name for p in tmp.iterdir() if not p.name.startswith("pytest-of-")] == []
    dev.close()


def test_a_test_run_writes_nothing_into_the_checkouts_var(tmp_path: Path) -> None:
    """Keys, the secret key, objects, SQLite files: a test run keeps them in a folder of its
    own (``rtcagent-test-var-*`` under TMPDIR) and removes it at the end. Run in a fresh clone,
    which has no ``var/`` yet: the run must not create one."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=60)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "RTC_VAR_DIR", "RTC_JWT_KEY_DIR",
                        "DJANGO_ALLOW_ASYNC_UNSAFE", "PYTHONPATH")}
    env["TMPDIR"] = str(tmp)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/accounts/test_views.py::test_jwks_alone_verifies_an_issued_token"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=180,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert not (clone / "var").exists()
    assert [p.name for p in tmp.iterdir() if p.name.startswith("rtcagent-test-var-")] == []


def test_a_private_valkey_whose_port_is_taken_meanwhile_starts_on_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two test processes starting at once once chose the same port and one of them died:
    a port taken between the choice and the bind is given up for the next one."""
    import socket

    from rtcagent import embedded

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        ports = iter([busy, embedded._free_port()])
        monkeypatch.setattr(embedded, "_free_port", lambda: next(ports))
        before = len(embedded._private)
        url = embedded.start_private_valkey()
    server = embedded._private.pop()
    try:
        assert len(embedded._private) == before
        assert f":{busy}/" not in url
        assert redis.Redis.from_url(url).ping() is True
    finally:
        server.stop()
