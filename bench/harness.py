"""What every case shares: the run's options and context, targets, and alternating rounds.

A case gets a ``Ctx`` (the stack, the options, a way to make users) and returns
``{"ratios": [...], ...}``; ``alternate`` runs ours and a baseline in rounds whose order flips
each round, with the CPU time per operation of each side's server processes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bench.stack import Stack
from bench.stats import Side, proc_cpu

NS = 1e6  # nanoseconds per millisecond


@dataclass
class Options:
    smoke: bool = False
    rounds: int = 5  # kept rounds; one warm-up round more is run and discarded

    def pick(self, full: Any, smoke: Any) -> Any:
        return smoke if self.smoke else full


@dataclass
class Ctx:
    stack: Stack
    opts: Options
    users: Callable[[int], list[tuple[Any, str]]]  # n -> [(user, token)]


def target(name: str, value: float, limit: float, *, most: bool = True, unit: str = "x") -> dict:
    """A ratio (or figure) with its target: ``value <= limit`` (``most``) or ``>= limit``."""
    ok = value <= limit if most else value >= limit
    return {"name": name, "value": value, "target": f"{'<=' if most else '>='} {limit:g}{unit}",
            "ok": bool(ok)}


def informational(name: str, value: float) -> dict:
    """A figure reported without a target (``(informational)`` in the table)."""
    return {"name": f"{name} (informational)", "value": value, "target": "-", "ok": True}


Run = Callable[[], Awaitable[tuple[list[float], int]]]


async def alternate(rounds: int, ours: Run, base: Run, ours_pids: list[int],
                    base_pids: list[int]) -> tuple[Side, Side]:
    """Run ``rounds`` + 1 rounds, the order flipping each round; CPU per operation from /proc."""
    o, b = await alternate_many(rounds, [(ours, ours_pids), (base, base_pids)])
    return o, b


async def alternate_many(rounds: int, runs: list[tuple[Run, list[int]]]) -> list[Side]:
    """``alternate`` with informational sides after the two it compares: each round runs ours
    and the baseline in an order that flips each round, exactly as ``alternate``, then the
    others, so that each of the two follows an extra side equally often."""
    sides = [Side() for _ in runs]
    for r in range(rounds + 1):
        for index in ([0, 1] if r % 2 == 0 else [1, 0]) + list(range(2, len(runs))):
            fn, pids = runs[index]
            before = proc_cpu(pids)
            samples, ops = await fn()
            cpu = proc_cpu(pids) - before
            sides[index].add(samples, cpu / ops if ops else None)
    return sides
