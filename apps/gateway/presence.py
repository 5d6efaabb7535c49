"""This web process's report: its open WebSockets and its metric samples, every few seconds.

The consumer calls ``opened(self)`` when a socket connects and ``closed(self)`` when it goes
away; the count is the size of a weak set, so a consumer that vanished without its
``disconnect`` (a crashed application instance) stops counting once collected, and a second
``closed`` changes nothing. The first ``opened`` (or the first HTTP request, through the latency
middleware) starts the reporting thread; management commands and processes that never serve
start nothing. The report (``apps.ops.processes``, kind ``web``) carries the socket count and
``apps.ops.metrics.snapshot()``, so ``/metrics`` on any web process can show every one of them.
Reporting runs in its own thread and never raises into the event loop.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from apps.ops import metrics, processes

_sockets: weakref.WeakSet[Any] = weakref.WeakSet()
_lock = threading.Lock()
_reporter: processes.Reporter | None = None


def opened(consumer: Any) -> None:
    _sockets.add(consumer)
    ensure_reporting()


def closed(consumer: Any) -> None:
    _sockets.discard(consumer)


def sockets() -> int:
    return len(_sockets)


def _collect() -> dict[str, Any]:
    return {"sockets": sockets(), "metrics": metrics.snapshot()}


def reporter() -> processes.Reporter:
    """This process's reporter (started on first use)."""
    global _reporter
    with _lock:
        if _reporter is None:
            _reporter = processes.Reporter("web", _collect)
            _reporter.start()
        return _reporter


def ensure_reporting() -> None:
    if _reporter is None:  # the common case without the lock
        reporter()
