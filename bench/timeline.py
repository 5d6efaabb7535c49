"""``--timeline``: where a live interruption spends its time inside the server processes.

A diagnostic beside the ``live`` case, not a figure any target reads. With ``--timeline`` the
runner starts Daphne and the workers with a ``sitecustomize`` (``site_dir``) that, once Django is
set up, wraps the functions of the interrupt path (``STEPS``) so that each logs
``TIMELINE <time.monotonic_ns> <thread> <name>>`` on entry and ``...<`` on exit to the process's
log. ``phases`` then cuts every interrupting input into consecutive steps, from the moment
``v1.channel.input`` reached its service to the new request leaving for the model, and reports
the median and p90 of each. The wrappers cost a few microseconds a call; a step whose function
was renamed is left out (``missing`` in the logs), never an error.
"""

from __future__ import annotations

import functools
import importlib
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# (module, attribute path) of each wrapped function, named by its attribute path
STEPS = [
    ("apps.live.services", "channel_input"),
    ("apps.live.interrupts", "Watch.fire"),
    ("apps.live.ports", "LivePorts.finish_answer"),
    ("apps.live.ports", "LivePorts.cancel"),
    ("apps.turns.worker", "Worker.start_turn"),
    ("apps.live.ports", "LivePorts.begin"),
    ("apps.live.ports", "LivePorts.prompt"),
    ("apps.turns.llm", "OpenAIChat._attempt"),
]
# consecutive marks of one interruption, each the first after the previous one, and the phase
# that ends at it
CHAIN = [
    ("Watch.fire>", "input received -> interrupt fired (the input's transaction committed)"),
    ("LivePorts.finish_answer<", "fired -> cut answer stored (stream aborted, partial text saved)"),
    ("LivePorts.cancel<", "cut turn closed (accounting, turn cancelled, checkpoint deleted)"),
    ("Worker.start_turn>", "between turns (memory-extraction check, ack, next item)"),
    ("LivePorts.begin<", "new turn created and running (two transactions, two Updates)"),
    ("LivePorts.prompt<", "prompt built (window, token counts)"),
    ("OpenAIChat._attempt>", "request sent to the model"),
]


def _log(name: str) -> None:
    sys.stderr.write(f"TIMELINE {time.monotonic_ns()} {threading.get_ident()} {name}\n")


def _wrap(module: str, path: str) -> bool:
    try:
        owner: Any = importlib.import_module(module)
        *parents, attr = path.split(".")
        for part in parents:
            owner = getattr(owner, part)
        fn: Callable[..., Any] = getattr(owner, attr)
    except (ImportError, AttributeError):
        _log(f"missing:{module}.{path}")
        return False

    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        _log(path + ">")
        try:
            return fn(*args, **kwargs)
        finally:
            _log(path + "<")

    setattr(owner, attr, timed)
    return True


def install_on_setup() -> None:
    """Wrap ``STEPS`` as soon as ``django.setup()`` has run in this process."""
    import django

    setup = django.setup

    @functools.wraps(setup)
    def setup_then_wrap(*args: Any, **kwargs: Any) -> None:
        setup(*args, **kwargs)
        for module, path in STEPS:
            _wrap(module, path)

    django.setup = setup_then_wrap


def site_dir() -> str:
    """A folder with the ``sitecustomize`` to put first on the servers' ``PYTHONPATH``."""
    folder = Path(tempfile.mkdtemp(prefix="rtc-bench-timeline-"))
    (folder / "sitecustomize.py").write_text(
        "import os\n\nif os.environ.get('BENCH_TIMELINE'):\n"
        "    from bench import timeline\n\n    timeline.install_on_setup()\n")
    return str(folder)


def enable() -> None:
    """Make the processes started from now on log their timeline (call before the stack)."""
    os.environ["BENCH_TIMELINE"] = "1"
    os.environ["PYTHONPATH"] = os.pathsep.join([site_dir(), os.environ.get("PYTHONPATH", "")])


def phases(logs: list[Path]) -> dict[str, Any]:
    """Median and p90 (ms) of each phase of the interruptions found in the processes' logs."""
    marks: list[tuple[int, str]] = []
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("TIMELINE "):
                _, t, _, name = line.split(" ", 3)
                marks.append((int(t), name))
    marks.sort()
    inputs = [t for t, name in marks if name == "channel_input>"]
    found: dict[str, list[float]] = {label: [] for _, label in CHAIN}
    found["total: input received -> request sent"] = []
    found["(v1.channel.input service, whole)"] = []
    for i, t0 in enumerate(inputs):
        end = inputs[i + 1] if i + 1 < len(inputs) else float("inf")
        window = [(t, name) for t, name in marks if t0 < t < end]
        done = next((t for t, name in window if name == "channel_input<"), None)
        if done is not None:
            found["(v1.channel.input service, whole)"].append((done - t0) / 1e6)
        times, last = [], t0
        for mark, _ in CHAIN:
            last = next((t for t, name in window if name == mark and t >= last), -1)
            if last < 0:
                break
            times.append(last)
        if len(times) < len(CHAIN):  # not an interruption (the call's first input), or cut short
            continue
        for (_, label), prev, t in zip(CHAIN, [t0, *times], times, strict=False):
            found[label].append((t - prev) / 1e6)
        found["total: input received -> request sent"].append((times[-1] - t0) / 1e6)

    def p90(values: list[float]) -> float:
        return sorted(values)[int(0.9 * (len(values) - 1))]

    return {"interruptions": len(found["total: input received -> request sent"]),
            "unit": "ms", "missing": sorted({n for _, n in marks if n.startswith("missing:")}),
            "phases": {label: {"p50": statistics.median(v), "p90": p90(v)}
                       for label, v in found.items() if v}}
