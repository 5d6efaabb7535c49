"""Rounds, medians and CPU accounting shared by the cases.

A case runs the baseline and ours alternately in rounds; the first round is a warm-up and is
discarded. Each round yields a list of samples per side; a side's figure is the median of its
round medians (p50) or of its round p99s, with the spread (min..max) of those round figures.
CPU time comes from ``/proc/<pid>/stat`` (user + system) of the server processes, divided by
the operations of the round.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids`` so far (children reaped by them included)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is the state (field 3); utime, stime, cutime, cstime are fields 14-17.
        total += sum(int(x) for x in fields[11:15]) / CLK_TCK
    return total


def proc_rss(pid: int) -> int:
    """Resident set size of ``pid`` in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


@dataclass
class Side:
    """One side (ours or the baseline) of a case: per-round samples and CPU."""

    rounds: list[list[float]] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # CPU seconds per operation, per round

    def add(self, samples: list[float], cpu_per_op: float | None = None) -> None:
        self.rounds.append(samples)
        if cpu_per_op is not None:
            self.cpu.append(cpu_per_op)

    def summary(self, warmup: int = 1) -> dict[str, Any]:
        kept = [r for r in self.rounds[warmup:] if r] or [r for r in self.rounds if r]
        cpu = self.cpu[warmup:] or self.cpu
        out: dict[str, Any] = {"rounds": len(kept), "samples": sum(len(r) for r in kept)}
        for name, q in (("p50", 0.5), ("p99", 0.99)):
            per_round = [percentile(r, q) for r in kept]
            out[name] = statistics.median(per_round) if per_round else float("nan")
            out[f"{name}_spread"] = [min(per_round), max(per_round)] if per_round else []
        if cpu:
            out["cpu_per_op"] = statistics.median(cpu)
        return out


def ratio(ours: float, base: float) -> float:
    return ours / base if base else float("inf")
