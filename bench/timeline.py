"""``--timeline``: where a turn's latency goes inside the server processes.

A diagnostic beside the cases, not a figure any target reads. With ``--timeline`` the runner
starts the web process and the workers with a ``sitecustomize`` (``site_dir``) that, once Django
is set up, wraps the functions named in ``STEPS`` so that each logs
``TIMELINE <time.monotonic_ns> <thread> <name>>`` on entry and ``...<`` on exit to the process's
log. ``phases`` then cuts each path of ``CHAINS`` into consecutive steps and reports the median
and p90 of each:

* ``live``: an interrupting input, from ``v1.channel.input`` reaching its service to the new
  request leaving for the model (the ``live`` case);
* ``turn``: a new message, from ``v1.message.send`` reaching its service to the answer's first
  chunk handed to the client's socket (the ``chunks`` case's time to first chunk); only messages
  with no other one within 200 ms, so that concurrent turns' steps are not mixed up;
* ``pause``: a browser tool call, from the end of the model's answer (its stream read to the
  end) to the RTC's transaction committed (its Update's bell sent); the answer's accounting
  waits until the next request is out, or the wait for the result goes quiet;
* ``resume``: a tool's result, from ``v1.rtc.submit_result`` reaching its service to the next
  request leaving for the model (the ``tools`` case's resume); the submit's commit is not on
  this path when the waiting worker takes the result early (``apps.turns.queue``).

The wrappers cost a few microseconds a call (of a coroutine function, only its call is timed,
not its run); a step whose function was renamed is left out (``missing`` in the logs), never an
error.
"""

from __future__ import annotations

import functools
import importlib
import math
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
    ("apps.sessions.services", "message_send"),
    ("apps.rtc.services", "rtc_submit_result"),
    ("apps.turns.worker", "Worker.handle"),
    ("apps.turns.runner", "DjangoTurnPorts.prompt"),
    ("apps.turns.runner", "DjangoTurnPorts.delta"),
    ("apps.turns.runner", "DjangoTurnPorts.record_result"),
    ("apps.turns.runner", "DjangoTurnPorts.create_rtc"),
    ("apps.turns.runner", "DjangoTurnPorts.rtc_outcome"),
    ("apps.gateway.consumer", "GatewayConsumer.send_live"),
    ("apps.turns.runner", "DjangoTurnPorts.finish_answer"),
    ("apps.turns.accounting", "record_answer"),
]
# per path: the mark that starts it, and its consecutive marks, each the first after the
# previous one, with the phase that ends at it
CHAINS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "live": ("channel_input>", [
        ("Watch.fire>", "input received -> interrupt fired (the input's transaction committed)"),
        ("LivePorts.finish_answer<",
         "fired -> cut answer stored (stream aborted, partial text saved)"),
        ("LivePorts.cancel<", "cut turn closed (accounting, turn cancelled, checkpoint deleted)"),
        ("Worker.start_turn>", "between turns (memory-extraction check, ack, next item)"),
        ("LivePorts.begin<", "new turn created and running"),
        ("LivePorts.prompt<", "prompt built (window, token counts)"),
        ("OpenAIChat._attempt>", "request sent to the model"),
    ]),
    "turn": ("message_send>", [
        ("message_send<", "message stored, Update published (the send's transaction)"),
        ("Worker.start_turn>", "a worker woke and took the session's item"),
        ("DjangoTurnPorts.prompt>", "turn created running, its ports set up"),
        ("OpenAIChat._attempt>", "prompt built (conversation, memory, reminders, tokens)"),
        ("DjangoTurnPorts.delta>", "model: request sent -> first chunk read"),
        ("GatewayConsumer.send_live>", "first chunk published -> at the client's socket"),
    ]),
    "pause": ("DjangoTurnPorts.finish_answer>", [
        ("DjangoTurnPorts.finish_answer<", "stream ended -> the answer's messages completed"),
        ("DjangoTurnPorts.create_rtc>", "the call recorded"),
        ("DjangoTurnPorts.create_rtc<",
         "call message, RTC and checkpoint committed, their Update's bell sent"),
    ]),
    "resume": ("rtc_submit_result>", [
        ("DjangoTurnPorts.record_result>",
         "a worker took the result (offered before the submit's commit, or woken after it)"),
        ("DjangoTurnPorts.record_result<", "the result recorded"),
        ("OpenAIChat._attempt>", "prompt built"),
    ]),
}
ISOLATED_NS = 200_000_000  # ``turn``: no other message this close


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
    """Per path of ``CHAINS``: how many were found, and the median and p90 (ms) of each phase
    and of the whole, from the processes' logs."""
    marks: list[tuple[int, str]] = []
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("TIMELINE "):
                _, t, _, name = line.split(" ", 3)
                marks.append((int(t), name))
    marks.sort()
    out: dict[str, Any] = {"unit": "ms",
                           "missing": sorted({n for _, n in marks if n.startswith("missing:")})}
    for path, (start, chain) in CHAINS.items():
        starts = [t for t, name in marks if name == start]
        if path == "turn":
            starts = [t for i, t in enumerate(starts)
                      if (i == 0 or t - starts[i - 1] > ISOLATED_NS)
                      and (i + 1 == len(starts) or starts[i + 1] - t > ISOLATED_NS)]
        found: dict[str, list[float]] = {label: [] for _, label in chain}
        total = f"total: {start[:-1]} -> {chain[-1][0][:-1]}"
        found[total] = []
        for i, t0 in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else float("inf")
            window = [(t, name) for t, name in marks if t0 < t < end]
            times, last = [], t0
            for mark, _ in chain:
                last = next((t for t, name in window if name == mark and t >= last), -1)
                if last < 0:
                    break
                times.append(last)
            if len(times) < len(chain):  # not this path (a call's first input), or cut short
                continue
            for (_, label), prev, t in zip(chain, [t0, *times], times, strict=False):
                found[label].append((t - prev) / 1e6)
            found[total].append((times[-1] - t0) / 1e6)
        if found[total]:
            out[path] = {"count": len(found[total]),
                         "phases": {label: {"p50": statistics.median(v), "p90": _p90(v)}
                                    for label, v in found.items() if v}}
    return out


def _p90(values: list[float]) -> float:
    """The nearest-rank 90th percentile (the maximum of fewer than ten values)."""
    return sorted(values)[math.ceil(0.9 * len(values)) - 1]
