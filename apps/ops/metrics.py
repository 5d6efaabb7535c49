"""Prometheus metrics; the only module that imports ``prometheus_client``.

Two kinds of numbers:

* **Latency histograms** a web process observes itself: HTTP requests
  (``apps.ops.middleware.RequestLatencyMiddleware``) and RPCs (``rpc_timed``, on the gateway
  consumer's ``_rpc``). They live in this process's own registry (``REGISTRY``).
* **System gauges** read at scrape time from Redis and the database: the numbers of the system
  page (services, workers, sockets, queue, open turns, errors in the last hour).

Multi-process: a router sends a scrape to any one web process, and workers serve no HTTP, so
per-process scraping would need every process addressable. Instead each web process puts its
samples (``snapshot()``) into its report in Redis every few seconds (``apps.gateway.presence``),
and ``/metrics`` on any web process renders the samples of every live web process with a
``process="host:pid"`` label, plus the gauges: one scrape target sees everything, at most one
report interval late for the other processes. A restarted process is a new ``process`` label,
so its counters start a new series (``rate()`` and ``histogram_quantile()`` over ``sum by``
handle that).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)

log = logging.getLogger(__name__)

CONTENT_TYPE = CONTENT_TYPE_LATEST
REGISTRY = CollectorRegistry(auto_describe=True)

HTTP_LATENCY = Histogram(
    "rtc_http_request_duration_seconds",
    "HTTP requests served by this web process, by method, route pattern and status class.",
    ["method", "route", "status"],
    registry=REGISTRY,
)
RPC_LATENCY = Histogram(
    "rtc_rpc_duration_seconds",
    "Centrifuge RPCs answered by this web process, by method (unknown names: 'unknown').",
    ["method"],
    registry=REGISTRY,
)


def observe_http(method: str, route: str, status: int, seconds: float) -> None:
    method = method if method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE",
                                  "OPTIONS") else "other"
    HTTP_LATENCY.labels(method, route or "unmatched", f"{status // 100}xx").observe(seconds)


def _rpc_method(cmd: Any) -> str:
    """Only registered names become label values: clients choose the method string."""
    from apps.gateway.registry import methods

    method = (getattr(cmd, "params", None) or {}).get("method")
    return method if isinstance(method, str) and method in methods() else "unknown"


def rpc_timed(
    func: Callable[[Any, Any], Awaitable[None]],
) -> Callable[[Any, Any], Awaitable[None]]:
    """Decorates the consumer's ``_rpc(self, cmd)``: its time, reply sent, is observed."""

    @functools.wraps(func)
    async def timed(self: Any, cmd: Any) -> None:
        started = time.perf_counter()
        try:
            await func(self, cmd)
        finally:
            RPC_LATENCY.labels(_rpc_method(cmd)).observe(time.perf_counter() - started)

    return timed


def snapshot() -> list[dict[str, Any]]:
    """This process's samples as JSON-able data, for its report in Redis."""
    return [
        {
            "name": family.name,
            "type": family.type,
            "help": family.documentation,
            "samples": [[s.name, s.labels, s.value] for s in family.samples
                        if not s.name.endswith("_created")],
        }
        for family in REGISTRY.collect()
    ]


def process_families(reports: Iterable[dict[str, Any]]) -> list[Metric]:
    """The snapshots of several processes merged into families, labelled ``process``."""
    families: dict[str, Metric] = {}
    for report in reports:
        for fam in report.get("metrics") or []:
            metric = families.get(fam["name"])
            if metric is None:
                metric = families[fam["name"]] = Metric(fam["name"], fam["help"], fam["type"])
            for name, labels, value in fam["samples"]:
                metric.add_sample(name, {**labels, "process": report["id"]}, value)
    return list(families.values())


def system_families(checks: list[Any], state: dict[str, Any] | None) -> Iterator[Metric]:
    """The system page's numbers as gauges and counters (``state`` None: Redis or the database
    did not answer, only the checks are known)."""
    up = GaugeMetricFamily("rtc_service_up", "1 when the service answered its probe.",
                           labels=["service"])
    took = GaugeMetricFamily("rtc_service_probe_seconds", "How long the service's probe took.",
                             labels=["service"])
    for check in checks:
        up.add_metric([check.name], 1.0 if check.ok else 0.0)
        took.add_metric([check.name], check.seconds)
    yield up
    yield took
    if state is None:
        return
    workers = state["workers"]
    yield GaugeMetricFamily("rtc_workers", "Worker processes whose heartbeat is current.",
                            value=len(workers))
    busy = GaugeMetricFamily("rtc_worker_busy", "1 while the worker holds a session.",
                             labels=["process"])
    done = CounterMetricFamily("rtc_worker_items_done", "Queue items a worker finished.",
                               labels=["process"])
    for w in workers:
        busy.add_metric([w["id"]], 1.0 if w.get("session") else 0.0)
        done.add_metric([w["id"]], float(w.get("items_done", 0)))
    yield busy
    yield done
    sockets = GaugeMetricFamily("rtc_web_sockets", "Open WebSockets of each web process.",
                                labels=["process"])
    for web in state["webs"]:
        sockets.add_metric([web["id"]], float(web.get("sockets", 0)))
    yield sockets
    depth = state["queue"]
    yield GaugeMetricFamily("rtc_queue_sessions_ready", "Sessions with queued work.",
                            value=depth["ready"])
    yield GaugeMetricFamily("rtc_queue_sessions_held", "Sessions a worker is draining.",
                            value=depth["held"])
    yield GaugeMetricFamily("rtc_queue_items", "Items queued in those sessions.",
                            value=depth["items"])
    turns = GaugeMetricFamily("rtc_turns_open", "Open turns by status (pending: waiting to "
                              "start; interrupted: waiting on a browser tool).",
                              labels=["status"])
    for status, n in state["turns"].items():
        turns.add_metric([status], float(n))
    yield turns
    errors = GaugeMetricFamily("rtc_turn_errors_last_hour", "Turns failed in the last hour, "
                               "by error category.", labels=["category"])
    for category, n in state["errors_last_hour"].items():
        errors.add_metric([category], float(n))
    yield errors


class _Families:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def exposition(families: list[Metric]) -> bytes:
    """The Prometheus text format of ``families``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry)
