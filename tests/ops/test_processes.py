"""Process reports in Redis (heartbeats), their key names, and the queue's depth."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from apps.ops import processes
from apps.turns import queue
from rtcagent import keys


def test_key_names_are_pinned() -> None:
    assert keys.process_report("worker", "h:1") == "rtc:ops:worker:h:1"
    assert keys.process_index("worker") == "rtc:ops:workers"
    assert keys.process_report("web", "h:2") == "rtc:ops:web:h:2"
    assert keys.process_index("web") == "rtc:ops:webs"


def test_a_report_appears_expires_and_is_pruned(redis_client: Any) -> None:
    processes.report("worker", "a:1", {"pid": 1, "started": 10.0}, ttl=1)
    processes.report("worker", "b:2", {"pid": 2, "started": 5.0})
    assert [(r["id"], r["pid"]) for r in processes.live("worker")] == [("b:2", 2), ("a:1", 1)]
    assert 0 < redis_client.ttl("rtc:ops:worker:a:1") <= 1
    time.sleep(1.2)
    assert [r["id"] for r in processes.live("worker")] == ["b:2"]
    # an index entry without its key goes once it is older than a few TTLs
    redis_client.zadd("rtc:ops:workers", {"a:1": time.time() - 10 * processes.TTL})
    processes.live("worker")
    assert redis_client.zrange("rtc:ops:workers", 0, -1) == ["b:2"]
    processes.withdraw("worker", "b:2")
    assert processes.live("worker") == []
    assert redis_client.keys("rtc:ops:worker*") == []


def test_a_reporter_beats_at_once_and_withdraws_on_stop(redis_client: Any) -> None:
    reporter = processes.Reporter("worker", lambda: {"items_done": 3}, interval=0.1)
    reporter.start()
    deadline = time.monotonic() + 3
    while not processes.live("worker") and time.monotonic() < deadline:
        time.sleep(0.02)
    (report,) = processes.live("worker")
    assert report["id"] == processes.this_process() == reporter.process_id
    assert report["items_done"] == 3 and report["started"] == reporter.started
    reporter.stop()
    assert processes.live("worker") == []
    assert not reporter._thread.is_alive()


def test_a_failing_report_is_logged_and_retried_never_raised(redis_client: Any,
                                                            caplog: Any) -> None:
    calls: list[int] = []

    def collect() -> dict[str, Any]:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("collector broke")
        return {"ok": True}

    reporter = processes.Reporter("worker", collect, interval=0.05)
    reporter.start()
    deadline = time.monotonic() + 3
    while not processes.live("worker") and time.monotonic() < deadline:
        time.sleep(0.02)
    reporter.stop()
    assert len(calls) >= 3
    assert "worker report failed" in caplog.text


def test_unknown_kinds_are_refused() -> None:
    with pytest.raises(ValueError):
        processes.Reporter("cron", dict)


def test_queue_depth_counts_sessions_and_items(redis_client: Any) -> None:
    assert queue.depth() == {"ready": 0, "held": 0, "items": 0, "truncated": 0}
    queue.enqueue_message("s1", "m1", user_id=1)
    queue.enqueue_message("s1", "m2", user_id=1)
    queue.enqueue_resume("s2", "t1", user_id=2)
    assert queue.depth() == {"ready": 2, "held": 0, "items": 3, "truncated": 0}
    assert queue.depth(scan=1)["truncated"] == 1
    hold = queue.claim(lease_ms=5000)
    assert hold is not None
    hold.take()
    depth = queue.depth()
    assert depth["held"] == 1 and depth["items"] == 2


def test_reports_are_json_with_host_and_pid(redis_client: Any) -> None:
    reporter = processes.Reporter("worker", lambda: {"items_done": 7})
    reporter.beat()
    body = json.loads(redis_client.get(keys.process_report("worker", reporter.process_id)))
    assert set(body) == {"id", "host", "pid", "started", "items_done", "reported_at"}
    reporter.stop()


def test_presence_counts_sockets_weakly() -> None:
    from apps.gateway import presence

    class Socket:
        pass

    before = presence.sockets()
    a, b = Socket(), Socket()
    presence.opened(a)
    presence.opened(b)
    assert presence.sockets() == before + 2
    presence.closed(a)
    presence.closed(a)  # a second close changes nothing
    assert presence.sockets() == before + 1
    del b  # a consumer that vanished without its disconnect
    assert presence.sockets() == before
