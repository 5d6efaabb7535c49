"""The garbage collector of the long-running processes (the web process and the workers).

CPython's collector runs a pass over its youngest generation every 700 net allocations of
container objects, over the middle one every 10 of those, and a full pass after 10 of those
once the objects that survived into the oldest generation since the last full pass reach a
quarter of it. A pass visits every object of the generations it collects, with every thread of
the process stopped. Loading Django and the apps leaves about 140,000 objects, and a full pass
over them takes 80-90 ms on the bench's machine: a stall of every socket of a web process, or
of every turn a worker streams. What keeps objects alive for a while (each socket's consumer,
tasks and buffers in a reconnect storm; the turns of a worker) triggers such passes again and
again.

``tune()``, once the process has loaded what it serves and before it serves:

* ``gc.freeze()``: what exists then (modules, settings, URL patterns, models) moves to the
  permanent generation, which no pass visits again (the CPython documentation's advice for
  servers, usually given for forking ones). It is never garbage: it lives as long as the process.
* thresholds ``RTC_GC_THRESHOLD`` (default ``10000,10,10``): a young pass per 10,000 net
  allocations rather than 700. Almost everything a request allocates is freed by reference
  counting first; the collector only finds reference cycles, which wait a little longer to be
  freed.
  ``off`` leaves the collector as CPython sets it (nothing frozen, ``700,10,10``).
"""

from __future__ import annotations

import gc
import logging
import os

from django.core.exceptions import ImproperlyConfigured

log = logging.getLogger(__name__)

DEFAULT_THRESHOLD = (10_000, 10, 10)


def threshold() -> tuple[int, int, int] | None:
    """``RTC_GC_THRESHOLD`` as three positive integers (young, middle, old), or None for
    ``off``."""
    raw = os.environ.get("RTC_GC_THRESHOLD", "").strip()
    if not raw:
        return DEFAULT_THRESHOLD
    if raw.lower() == "off":
        return None
    try:
        young, middle, old = (int(part) for part in raw.split(","))
    except ValueError:
        raise ImproperlyConfigured(
            f"RTC_GC_THRESHOLD={raw!r}: three positive integers (e.g. 10000,10,10) or off"
        ) from None
    if min(young, middle, old) < 1:
        raise ImproperlyConfigured(f"RTC_GC_THRESHOLD={raw!r}: each number must be at least 1")
    return young, middle, old


def tune(process: str) -> None:
    """Freeze what the process has loaded and set the thresholds (see the module docstring)."""
    chosen = threshold()
    if chosen is None:
        log.info("%s: the collector as CPython sets it (RTC_GC_THRESHOLD=off)", process)
        return
    young, middle, old = chosen
    gc.collect()  # what start-up left as garbage, freed rather than frozen
    gc.freeze()
    gc.set_threshold(young, middle, old)
    log.info("%s: %d objects frozen at start, collector thresholds %d,%d,%d",
             process, gc.get_freeze_count(), young, middle, old)
