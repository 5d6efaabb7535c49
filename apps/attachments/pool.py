"""The image process pool: decoding and compressing never run on a turn's thread.

Why processes and not threads: Pillow releases the GIL only inside some codecs, and resizing,
EXIF handling, resvg's Python glue and base64 hold it; on a 2-core host a 12-megapixel JPEG
would stall the worker's other threads (lease renewal, the stop poll) for hundreds of
milliseconds. Processes are also the only way to bound a job's memory (``RLIMIT_AS``) and to
kill a job that runs too long.

* ``concurrent.futures.ProcessPoolExecutor`` with the ``spawn`` start method (a worker process
  holds threads, sockets and database connections that a fork would copy), started lazily on
  the first job, ``WORKERS`` processes (2 by default).
* Each process lowers its CPU priority (``os.nice``) so the web and worker processes streaming
  other sessions' chunks win the CPU, and caps its address space (``RLIMIT_AS``).
* At most ``WORKERS`` jobs are in the pool at once, so a job's deadline is counted from its
  start. A job past its deadline gets the whole pool killed (a running job cannot be cancelled
  otherwise); the other jobs then running are resubmitted to a new pool, not blamed.
* A pool process ends itself when its parent is gone (a worker killed with SIGKILL leaves no
  orphans behind).
* A process that dies (the kernel's OOM killer, a native crash, Rust aborting on allocation
  failure) breaks the pool: every job then in flight is retried once, alone, so only the job
  that kills its process again fails (``JobDied``).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import resource
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

WORKERS = 2
NICE = 10
MEMORY_BYTES = 1536 * 1024 * 1024  # address space per process (Pillow + resvg + one image)
JOB_TIMEOUT = 30.0
TASKS_PER_CHILD = 200  # a fresh process now and then returns fragmented memory


class JobFailed(Exception):
    """A job produced no result for a reason of the pool, not of its input."""


class JobTimedOut(JobFailed):
    pass


class JobDied(JobFailed):
    pass


def _orphan_watch(parent: int) -> None:
    """End this process when its parent is gone. A pool process holds both ends of the job
    queue, so a parent killed with SIGKILL would otherwise leave it waiting forever."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def _init_process(nice: int, memory_bytes: int) -> None:
    threading.Thread(target=_orphan_watch, args=(os.getppid(),), daemon=True,
                     name="orphan-watch").start()
    try:
        os.nice(nice)
    except OSError:  # pragma: no cover - not allowed to lower: run at the same priority
        pass
    if memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))


@dataclass
class _Job:
    index: int
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    alone: bool = False  # retried after a broken pool: runs with nothing beside it
    started: float = 0.0
    future: Future[Any] | None = field(default=None, repr=False)


class ImagePool:
    """A small, lazily started process pool with per-job deadlines. Thread-safe: batches from
    several threads run one after another (the pool has ``workers`` processes anyway)."""

    def __init__(self, *, workers: int = WORKERS, nice: int = NICE,
                 memory_bytes: int = MEMORY_BYTES, timeout: float = JOB_TIMEOUT) -> None:
        self.workers = max(1, workers)
        self.nice = nice
        self.memory_bytes = memory_bytes
        self.timeout = timeout
        self._executor: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    # --- lifecycle -----------------------------------------------------------------------
    def _pool(self) -> ProcessPoolExecutor:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_process,
                initargs=(self.nice, self.memory_bytes),
                max_tasks_per_child=TASKS_PER_CHILD,
            )
        return self._executor

    def _kill(self) -> None:
        """End every process of the pool now (the only way to stop a running job)."""
        executor, self._executor = self._executor, None
        if executor is None:
            return
        # No public API kills a running job; the executor's process table is the way.
        processes = list(getattr(executor, "_processes", {}).values())
        for proc in processes:
            if proc.is_alive():
                proc.kill()
        executor.shutdown(wait=True, cancel_futures=True)

    def shutdown(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)

    def pids(self) -> list[int]:
        """The pool's live process ids (benchmarks read their CPU time from /proc)."""
        executor = self._executor
        procs = getattr(executor, "_processes", None) or {}
        return [p.pid for p in list(procs.values()) if p.pid and p.is_alive()]

    # --- jobs ----------------------------------------------------------------------------
    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """One job; its exception (or ``JobFailed``) is raised."""
        (outcome,) = self.map([(fn, args)])
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def map(self, jobs: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]]) -> list[Any]:
        """Run ``fn(*args)`` for each job; returns, in order, each result or the exception it
        ended with (the job's own, ``JobTimedOut`` or ``JobDied``)."""
        with self._lock:
            return self._map([_Job(i, fn, args) for i, (fn, args) in enumerate(jobs)])

    def _map(self, todo: list[_Job]) -> list[Any]:
        results: dict[int, Any] = {}
        waiting = list(todo)
        running: list[_Job] = []
        while waiting or running:
            while waiting and (not running or not (waiting[0].alone or running[0].alone)) \
                    and len(running) < self.workers:
                job = waiting.pop(0)
                try:
                    job.future = self._pool().submit(job.fn, *job.args)
                except BrokenProcessPool:  # broke between two submissions
                    self._kill()
                    job.future = self._pool().submit(job.fn, *job.args)
                job.started = time.monotonic()
                running.append(job)
            deadline = min(job.started for job in running) + self.timeout
            done, _ = wait([j.future for j in running if j.future],
                           timeout=max(0.0, deadline - time.monotonic()),
                           return_when=FIRST_COMPLETED)
            if not done:  # the oldest job ran out of time: kill, resubmit the others
                late = min(running, key=lambda j: j.started)
                log.warning("image job %d took longer than %.0f s; killing the pool",
                            late.index, self.timeout)
                results[late.index] = JobTimedOut(f"took longer than {self.timeout:g} s")
                running.remove(late)
                self._kill()
                waiting[:0] = running
                running = []
                continue
            broken = False
            for job in list(running):
                if job.future not in done:
                    continue
                running.remove(job)
                exc = job.future.exception()
                if isinstance(exc, BrokenProcessPool):
                    broken = True
                    if job.alone:
                        log.warning("image job %d killed its process", job.index)
                        results[job.index] = JobDied("the processing process died")
                    else:
                        job.alone = True
                        waiting.insert(0, job)
                else:
                    results[job.index] = exc if exc is not None else job.future.result()
            if broken:
                self._kill()
                for job in running:  # also lost with the pool: retried alone
                    job.alone = True
                waiting[:0] = running
                running = []
        return [results[job.index] for job in todo]


_pool: ImagePool | None = None
_pool_lock = threading.Lock()


def get_pool(**config: Any) -> ImagePool:
    """The process's image pool (its processes start with the first job); ``config`` (the
    ``ImagePool`` arguments) applies when this call creates it."""
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ImagePool(**config)
    return _pool


def shutdown_pool() -> None:
    global _pool
    with _pool_lock:
        if _pool is not None:
            _pool.shutdown()
        _pool = None
