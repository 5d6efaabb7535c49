"""``python manage.py rtc_worker``: run turns from the session queue until SIGTERM/SIGINT.

It refuses to start on a Redis that may evict keys (``apps.turns.checks``), under DEBUG too: a
worker's locks and queue items must never vanish. A Redis that does not answer yet is waited
for, as the worker loop would.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

import redis
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from rtcagent import gctune

log = logging.getLogger("apps.turns.worker")


class Command(BaseCommand):
    help = "Run agent turns from the session queue (Procfile: worker)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--turns", type=int, default=None,
            help="turns this process runs at once (default: RTC_WORKER_TURNS, 4)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from apps.turns.worker import Worker

        if options["turns"] is not None and options["turns"] < 1:
            raise CommandError("--turns must be at least 1")
        worker = Worker(turns=options["turns"])

        def stop(*_: object) -> None:
            worker.stopping.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:  # before the wait for Redis, so that a bad setting fails at once
            gctune.tune("worker")
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        if not self._redis_never_evicts(worker.stopping):
            return
        worker.run()

    def _redis_never_evicts(self, stopping: threading.Event) -> bool:
        """True once Redis answered with ``noeviction``; False when stopped while waiting.
        Raises ``CommandError`` for any other policy."""
        from apps.turns.checks import HINT, eviction_problem, redis_memory_policy

        while not stopping.is_set():
            try:
                problem = eviction_problem(*redis_memory_policy())
            except redis.RedisError as exc:
                log.warning("Redis does not answer (%s); waiting for it before starting", exc)
                stopping.wait(1)
                continue
            if problem:
                raise CommandError(f"refusing to start: {problem}\n{HINT}")
            return True
        return False
