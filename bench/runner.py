"""``make bench`` / ``python -m bench``: start the stack, run the cases, write the results.

Writes ``bench/results/latest.json`` and ``bench/results/latest.md`` (``--smoke``: ``smoke.json``
and ``smoke.md``, so a smoke run never overwrites real figures) and prints every ratio with its
target. Needs PostgreSQL (``DATABASE_URL``) and Redis (``REDIS_URL``); see docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench import stack as st

RESULTS = st.ROOT / "bench" / "results"


def make_users(n: int) -> list[tuple[Any, str]]:
    """``n`` fresh users (no password) with an access token each."""
    from django.contrib.auth import get_user_model

    from apps.accounts.tokens import issue_access_token

    model = get_user_model()
    tag = uuid.uuid4().hex[:8]
    users = []
    for i in range(n):
        user = model(email=f"bench-{tag}-{i}@bench.invalid")
        user.set_unusable_password()
        users.append(user)
    users = model.objects.bulk_create(users, batch_size=1000)
    return [(u, issue_access_token(u)) for u in users]


def drop_users() -> int:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.filter(email__endswith="@bench.invalid").delete()[0]


def drop_floor() -> None:
    """The durable floor's tables (``bench.bare.Floor``), if it made them."""
    from django.db import connection

    from bench.bare import FLOOR_SCHEMA

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"DROP SCHEMA IF EXISTS {FLOOR_SCHEMA} CASCADE")


def profile(stack: st.Stack, folder: Path) -> list[subprocess.Popen[bytes]]:
    """``py-spy record`` of the web process and each worker (idle frames left out) until the run
    ends: ``web.txt``, ``worker-<n>.txt``."""
    spy = Path(sys.executable).with_name("py-spy")
    folder.mkdir(parents=True, exist_ok=True)
    return [subprocess.Popen(  # noqa: S603
        [str(spy), "record", "--format", "raw", "-r", "200", "-o", str(folder / f"{p.name}.txt"),
         "-p", str(p.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for p in [stack.web, *stack.workers_procs] if p is not None]


def fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def markdown(report: dict[str, Any]) -> str:
    lines = [f"Run {report['when']} ({report['mode']}, {report['machine']['cpus']} cores, "
             f"load average at start {report['machine']['loadavg']}); "
             f"{report['rounds']} rounds kept per case, one warm-up discarded.", "",
             "| case | ratio | value | target | ok |", "|---|---|---|---|---|"]
    for name, case in report["cases"].items():
        if "error" in case:
            lines.append(f"| {name} | (failed: {case['error'][:80]}) | | | no |")
            continue
        for r in case["ratios"]:
            lines.append(f"| {name} | {r['name']} | {fmt(r['value'])} | {r['target']} | "
                         f"{'yes' if r['ok'] else '**no**'} |")
    return "\n".join(lines) + "\n"


async def warm_up(ctx: Any) -> None:
    """A few short turns at once, so that every worker has built its tokenizer and model client
    (its first turn is slow) before anything is measured."""
    from bench.clients import Tab

    tabs = [await Tab(ctx.stack.ws_url, tok).open() for _, tok in ctx.users(2 * ctx.stack.workers)]
    sids = await asyncio.gather(*(t.send("chunks 3 0") for t in tabs))
    for tab, sent in zip(tabs, sids, strict=True):
        sid = sent["result"]["session_id"]
        await tab.ev.until(lambda s=sid, t=tab: s in t.ev.done_turns, 120)
        await tab.close()
    ctx.stack.stamps()


async def run_cases(ctx: Any, names: list[str]) -> dict[str, Any]:
    from bench.cases import CASES

    await warm_up(ctx)
    results: dict[str, Any] = {}
    for name in names:
        t = time.perf_counter()
        print(f"== {name}", flush=True)
        try:
            results[name] = await CASES[name](ctx)
        except Exception as exc:  # one broken case must not hide the others' figures
            import traceback

            traceback.print_exc()
            results[name] = {"error": f"{type(exc).__name__}: {exc}", "ratios": []}
        results[name]["seconds"] = time.perf_counter() - t
        ctx.stack.check_alive()
        for r in results[name]["ratios"]:
            print(f"   {r['name']:<55} {fmt(r['value']):>8}  target {r['target']:<16} "
                  f"{'ok' if r['ok'] else 'MISSED'}", flush=True)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="a ~10 s run that only checks the harness works")
    parser.add_argument("--only", default="", help="comma-separated cases (default: all)")
    parser.add_argument("--rounds", type=int, default=5, help="kept rounds (default 5)")
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes (default 2; 1 in the smoke run)")
    parser.add_argument("--turns", type=int, default=16,
                        help="turns each worker runs at once (RTC_WORKER_TURNS; default 16, "
                             "above the sustained case's levels, so that the case measures the "
                             "processes, not the setting)")
    parser.add_argument("--ping", type=float, default=10.0,
                        help="RTC_PING_INTERVAL of the stack (default 10 s; idle CPU is scaled "
                             "to production's 25 s)")
    parser.add_argument("--profile", type=Path, default=None,
                        help="record py-spy profiles (collapsed stacks) of ours into this folder")
    parser.add_argument("--timeline", action="store_true",
                        help="log and report where a new turn, a resume and a live interruption "
                             "spend their time in the server processes (bench/timeline.py)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    args = parser.parse_args(argv)
    from bench.cases import CASES
    from bench.harness import Ctx, Options

    names = [n for n in args.only.split(",") if n] or list(CASES)
    if unknown := [n for n in names if n not in CASES]:
        parser.error(f"unknown case(s): {', '.join(unknown)}; known: {', '.join(CASES)}")
    opts = Options(smoke=args.smoke, rounds=1 if args.smoke else max(1, args.rounds))

    st.configure_env()
    if st.LOAD_CORES != st.SERVER_CORES:
        os.sched_setaffinity(0, st.LOAD_CORES)
    import django

    django.setup()
    args.workers = args.workers or (1 if args.smoke else 2)
    if args.timeline:
        from bench import timeline

        timeline.enable()
    stack = st.Stack(workers=args.workers, turns=args.turns, ping=args.ping)
    started = time.perf_counter()
    loadavg = " ".join(f"{x:.2f}" for x in os.getloadavg())
    try:
        stack.start()
        profilers = profile(stack, args.profile) if args.profile else []
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "1"  # this process only: setup via the ORM
        ctx = Ctx(stack=stack, opts=opts, users=make_users)
        cases = asyncio.run(run_cases(ctx, names))
    finally:
        for prof in profilers if args.profile else []:
            prof.send_signal(signal.SIGINT)
            prof.wait(30)
        stack.stop()
        try:
            drop_users()
            drop_floor()
        except Exception as exc:
            print(f"could not delete the bench users and tables: {exc}", file=sys.stderr)
    report = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "mode": "smoke" if args.smoke else "full",
        "rounds": opts.rounds,
        "seconds": time.perf_counter() - started,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "loadavg": loadavg, "server_cores": sorted(st.SERVER_CORES),
                    "load_cores": sorted(st.LOAD_CORES)},
        "stack": {"workers": args.workers, "turns_per_worker": args.turns,
                  "ping_interval_s": args.ping,
                  "database": os.environ["DATABASE_URL"].split("://")[0],
                  "debug": False,
                  "compression": "off (the web process accepts none; baselines none)"},
        "cases": cases,
    }
    if args.timeline:
        report["timeline"] = timeline.phases([p.log for p in stack.procs])
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "smoke" if args.smoke else "latest"
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    table = markdown(report)
    (args.out / f"{stem}.md").write_text(table)
    print()
    print(table)
    if args.timeline:
        found = report["timeline"]
        print(f"timeline (ms; missing steps: {', '.join(found['missing']) or 'none'}):")
        for path in ("live", "turn", "pause", "resume"):
            if path in found:
                print(f"  {path} ({found[path]['count']} found)")
                for label, figures in found[path]["phases"].items():
                    print(f"   {label:<75} p50 {figures['p50']:7.1f}  p90 {figures['p90']:7.1f}")
    print(f"wrote {args.out}/{stem}.json and {stem}.md in {report['seconds']:.0f} s; "
          f"server logs in {st.LOG_DIR}")
    failed = [n for n, c in cases.items() if "error" in c]
    if failed:
        raise SystemExit(f"cases failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
