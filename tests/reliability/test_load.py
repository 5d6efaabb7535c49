"""Load: many users streaming through two web processes, a burst for one user, a reconnect storm.

Every client checks that its topic offsets are consecutive within one epoch (no gap, no
duplicate) and ends at the stream's counter. CI runs a smaller load than the documented runs;
the code is the same: ``RTC_LOAD_USERS`` (default 150) and ``RTC_LOAD_SECONDS`` (default 10) scale
it, e.g. ``RTC_LOAD_USERS=1000 RTC_LOAD_SECONDS=60`` for the run in docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model

from apps.accounts.tokens import issue_access_token
from apps.gateway import stream
from tests.livesrv import ROOT, LiveServer, child_env, start_daphne
from tests.reliability.wsclient import TopicClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

USERS = int(os.environ.get("RTC_LOAD_USERS", "150"))
SECONDS = float(os.environ.get("RTC_LOAD_SECONDS", "10"))
RATE = float(os.environ.get("RTC_LOAD_RATE", "150"))  # Updates per second, all users together


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@pytest.fixture(scope="module")
def two_webs(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[list[LiveServer]]:
    log_dir = tmp_path_factory.mktemp("load")
    servers = [start_daphne(log_dir, RTC_PING_INTERVAL="5", RTC_PONG_TIMEOUT="3")
               for _ in range(2)]
    yield servers
    for s in servers:
        s.stop()


def _users(count: int, tag: str) -> list[Any]:
    model = get_user_model()
    model.objects.bulk_create(
        [model(email=f"load-{tag}-{i}@example.com") for i in range(count)], batch_size=500)
    return list(model.objects.filter(email__startswith=f"load-{tag}-").order_by("pk"))


def _publish(users: list[Any], rate: float, seconds: float, procs: int = 2,
             threads: int = 2) -> list[subprocess.Popen[Any]]:
    """Start publisher processes over disjoint slices of the users."""
    out = []
    size = max(1, len(users) // procs)
    for n in range(procs):
        part = users[n * size: len(users) if n == procs - 1 else (n + 1) * size]
        if not part:
            continue
        out.append(subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.loadgen", str(part[0].pk),
             str(part[-1].pk), str(rate / procs), str(seconds), str(threads)],
            cwd=ROOT, env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE))
    if rate <= 0:  # a burst: every publisher set up first, then all start at once
        for p in out:
            assert p.stdout is not None and p.stdout.readline().strip() == b"ready"
        for p in out:
            assert p.stdin is not None
            p.stdin.write(b"go\n")
            p.stdin.flush()
    return out


def _published(procs: list[subprocess.Popen[Any]], stats: dict[str, float] | None = None) -> int:
    total = 0
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
        result = json.loads(out.decode().strip().splitlines()[-1])
        total += result["published"]
        if stats is not None:
            stats["elapsed"] = max(stats.get("elapsed", 0.0), result["elapsed"])
    return total


async def _caught_up(clients: list[TopicClient], within: float = 60) -> None:
    targets = {c.user_id: (await sync_to_async(stream.position)(c.user_id)).offset
               for c in clients}
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if all(c.last >= targets[c.user_id] for c in clients):
            return
        await asyncio.sleep(0.2)
    behind = [(c.user_id, c.last, targets[c.user_id]) for c in clients
              if c.last < targets[c.user_id]]
    raise AssertionError(f"{len(behind)} clients behind, e.g. {behind[:5]}")


async def _start(clients: list[TopicClient]) -> list[asyncio.Task[None]]:
    tasks = [asyncio.create_task(c.run()) for c in clients]
    await asyncio.wait_for(asyncio.gather(*(c.connected.wait() for c in clients)), 60)
    return tasks


async def _stop(clients: list[TopicClient], tasks: list[asyncio.Task[None]]) -> None:
    for c in clients:
        await c.stop()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_many_users_stream_through_two_web_processes(two_webs) -> None:
    users = await sync_to_async(_users)(USERS, "many")
    clients = [TopicClient(two_webs[i % 2].ws_url, issue_access_token(u), u.pk)
               for i, u in enumerate(users)]
    tasks = await _start(clients)
    rss_before = [rss_mb(s.proc.pid) for s in two_webs]
    total = await sync_to_async(_published)(_publish(users, RATE, SECONDS))
    await _caught_up(clients)
    rss_after = [rss_mb(s.proc.pid) for s in two_webs]
    await _stop(clients, tasks)

    assert total >= RATE * SECONDS * 0.5, "the publishers could not keep a meaningful rate"
    assert sum(c.received for c in clients) == total
    assert [c for c in clients if c.errors] == []
    assert all(c.closes == [] for c in clients)
    # bounded: a few MB of Python per hundred sockets, not the stream's size
    for before, after in zip(rss_before, rss_after, strict=True):
        assert after - before < 150 + USERS * 0.5, (rss_before, rss_after)
    print(f"\nload: {USERS} users, {total} Updates in {SECONDS:.0f} s, "
          f"web RSS {rss_before} -> {rss_after} MB")


async def test_a_burst_of_500_updates_for_one_user_ends_gap_free(two_webs) -> None:
    (user,) = await sync_to_async(_users)(1, "burst")
    token = issue_access_token(user)
    live = [TopicClient(s.ws_url, token, user.pk) for s in two_webs]
    tasks = await _start(live)
    stats: dict[str, float] = {}
    total = await sync_to_async(_published)(  # 4 processes x 4 threads, 125 each, at once
        _publish([user, user, user, user], rate=0, seconds=125, procs=4, threads=4), stats)
    await _caught_up(live)
    late = TopicClient(two_webs[0].ws_url, token, user.pk, epoch=live[0].epoch, last=0,
                       connects=1)  # recovers the whole burst from offset 0
    tasks += await _start([late])
    await _caught_up([late])
    await _stop([*live, late], tasks)

    assert total == 500, total
    print(f"\nburst: {total} Updates for one user published in {stats['elapsed']:.2f} s")
    for c in [*live, late]:
        assert c.errors == [] and c.received == total and c.last == total
    assert late.recovered == [True]


async def test_a_reconnect_storm_recovers_every_client(two_webs, tmp_path) -> None:
    """Every socket of one web process drops at once (SIGKILL) while Updates flow; all clients
    come back (jittered backoff) on the restarted process and recover without a gap."""
    users = await sync_to_async(_users)(max(20, USERS // 2), "storm")
    victim = start_daphne(tmp_path, RTC_PING_INTERVAL="5", RTC_PONG_TIMEOUT="3")
    clients = [TopicClient(victim.ws_url, issue_access_token(u), u.pk) for u in users]
    tasks = await _start(clients)
    publishers = _publish(users, RATE, max(6.0, SECONDS / 2))
    await asyncio.sleep(1.5)
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait()
    await asyncio.sleep(0.5)
    restarted = start_daphne(tmp_path, port=victim.port, RTC_PING_INTERVAL="5",
                             RTC_PONG_TIMEOUT="3")
    try:
        total = await sync_to_async(_published)(publishers)
        await _caught_up(clients)
        await _stop(clients, tasks)
    finally:
        restarted.stop()

    assert [c for c in clients if c.errors] == []
    assert all(c.connects >= 2 for c in clients), "every client reconnected"
    assert all(all(c.recovered) and c.recovered for c in clients)
    assert sum(c.received for c in clients) == total
