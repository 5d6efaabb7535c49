"""Process reports: every worker and web process says in Redis, every few seconds, that it lives.

A report is one JSON object under ``keys.process_report(kind, id)`` with a TTL, and the process
id in the ``keys.process_index(kind)`` sorted set, scored by the time of its last report. A
process that dies stops reporting: its key expires within ``TTL`` seconds and readers drop the
index entry. A process that stops cleanly withdraws its report at once.

Reporting is best effort and isolated: ``Reporter`` runs in a daemon thread, and an error (Redis
away, a collector that raises) is logged and retried at the next tick. It never reaches the
process it describes, so a failing report never stops a worker or a web process.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from rtcagent import keys
from rtcagent.redis import get_redis

log = logging.getLogger(__name__)

INTERVAL = 3.0  # seconds between two reports
TTL = 10  # seconds a report outlives its process (three missed reports)
KINDS = ("worker", "web")


def this_process() -> str:
    """``host:pid``: unique among live processes, readable on the system page."""
    return f"{socket.gethostname()}:{os.getpid()}"


def report(kind: str, process_id: str, data: dict[str, Any], *, ttl: int = TTL) -> None:
    """Store the report of one process (replacing its previous one)."""
    now = time.time()
    body = json.dumps({**data, "id": process_id, "reported_at": now}, separators=(",", ":"))
    with get_redis().pipeline(transaction=False) as pipe:
        pipe.set(keys.process_report(kind, process_id), body, ex=ttl)
        pipe.zadd(keys.process_index(kind), {process_id: now})
        pipe.execute()


def withdraw(kind: str, process_id: str) -> None:
    with get_redis().pipeline(transaction=False) as pipe:
        pipe.delete(keys.process_report(kind, process_id))
        pipe.zrem(keys.process_index(kind), process_id)
        pipe.execute()


def live(kind: str) -> list[dict[str, Any]]:
    """The current reports of a kind, oldest process first; expired ones are pruned."""
    r = get_redis()
    index = keys.process_index(kind)
    r.zremrangebyscore(index, "-inf", time.time() - 6 * TTL)
    ids = r.zrange(index, 0, -1)
    if not ids:
        return []
    bodies = r.mget([keys.process_report(kind, pid) for pid in ids])
    reports = [json.loads(body) for body in bodies if body]
    return sorted(reports, key=lambda rep: (rep.get("started", 0), rep["id"]))


class Reporter:
    """Reports ``collect()`` (plus host, pid and start time) every ``interval`` seconds from a
    daemon thread, the first time at once; ``stop()`` withdraws the report."""

    def __init__(
        self, kind: str, collect: Callable[[], dict[str, Any]], *, interval: float = INTERVAL
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown process kind {kind!r}")
        self.kind = kind
        self.collect = collect
        self.interval = interval
        self.process_id = this_process()
        self.started = time.time()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            self._thread = threading.Thread(
                target=self._run, name=f"{self.kind}-report", daemon=True
            )
            self._thread.start()
        except Exception:  # never the caller's problem
            log.exception("could not start the %s report thread", self.kind)

    def beat(self) -> None:
        """One report now (also called directly by a scrape, for fresh numbers)."""
        data = {"host": socket.gethostname(), "pid": os.getpid(), "started": self.started,
                **self.collect()}
        report(self.kind, self.process_id, data, ttl=TTL)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5)
        try:
            withdraw(self.kind, self.process_id)
        except Exception:  # it expires by itself
            log.warning("could not withdraw the %s report", self.kind, exc_info=True)

    def _run(self) -> None:
        while True:
            try:
                self.beat()
            except Exception:
                log.warning("%s report failed; retrying in %.0f s", self.kind, self.interval,
                            exc_info=True)
            if self._stop.wait(self.interval):
                return
