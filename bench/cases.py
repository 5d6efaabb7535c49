"""The cases of ``make bench``. Each returns ``{"ours": ..., "baseline": ..., "ratios": [...]}``.

Ours goes through the full stack (the official ``centrifuge-python`` client, the web process,
the worker, PostgreSQL, Redis, the scripted model); each baseline is the simplest program doing
the same unavoidable work (``bench.bare``). Both alternate in rounds (``alternate``). The
``live`` case (``bench.live``, issue 15) has no baseline: its target is absolute.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from centrifuge import ReplyError
from websockets.asyncio.client import connect

from bench.clients import Relay, Tab
from bench.harness import NS, Ctx, alternate, alternate_many, informational, target
from bench.live import interruption
from bench.proto import RawClient
from bench.stats import Side, percentile, proc_cpu, proc_rss, ratio

# --- RPC round trip -----------------------------------------------------------------------------


async def rpc(ctx: Ctx) -> dict[str, Any]:
    """RPC round trips through the full stack (the official client) vs the same frame echoed by a
    bare ``websockets`` server. The API has no no-op method, so the no-op is a call of a method
    that does not exist (frame parsing, dispatch, the RPC task, the registry, an error reply: the
    full transport, without a database hop); ``v1.session.list`` on an empty account is the
    cheapest real call (the transport plus one thread hop and one query)."""
    count = ctx.opts.pick(100, 10)
    ((_, token),) = ctx.users(1)
    tab = await Tab(ctx.stack.ws_url, token).open()
    echo = await connect(ctx.stack.bare_url("echo"), compression=None, ping_interval=None)
    out: dict[str, Any] = {"unit": "ms", "per_round": count, "ratios": []}

    def ours_calls(method: str) -> Callable[[], Awaitable[tuple[list[float], int]]]:
        async def ours() -> tuple[list[float], int]:
            samples = []
            for _ in range(count):
                t = time.perf_counter()
                with contextlib.suppress(ReplyError):
                    await tab.client.rpc(method, {})
                samples.append((time.perf_counter() - t) * 1000)
            return samples, count

        return ours

    def base_calls(method: str) -> Callable[[], Awaitable[tuple[list[float], int]]]:
        async def base() -> tuple[list[float], int]:
            samples = []
            for n in range(count):
                frame = orjson.dumps({"id": n + 1, "rpc": {"method": method, "data": {}}})
                t = time.perf_counter()
                await echo.send(frame.decode())
                await echo.recv()
                samples.append((time.perf_counter() - t) * 1000)
            return samples, count

        return base

    try:
        for label, method, limit in (("no-op", "v1.bench.noop", 3.0),
                                     ("v1.session.list", "v1.session.list", None)):
            o, b = await alternate(ctx.opts.rounds, ours_calls(method), base_calls(method),
                                   ctx.stack.server_pids(), [ctx.stack.bare["echo"].pid])
            so, sb = o.summary(), b.summary()
            out[label] = {"ours": so, "baseline": sb}
            value = ratio(so["p50"], sb["p50"])
            if limit is not None:
                out["ratios"].append(target(f"rpc {label} p50", value, limit))
            else:
                out["ratios"].append(informational(f"rpc {label} p50", value))
    finally:
        await tab.close()
        await echo.close()
    return out


# --- chunk latency ------------------------------------------------------------------------------


def _latencies(received: dict[str, int], emitted: dict[str, int]) -> list[float]:
    return [(received[p] - emitted[p]) / NS for p in received if p in emitted]


async def _ours_turns(ctx: Ctx, tabs: list[Tab], text: str, chunks: int) -> tuple[list, list]:
    """Start one turn per tab at once; wait for every chunk (or the turn's end: a chunk may be
    dropped, live is at most once). Returns (latencies, ttfts) in ms; drops add to ``LOST``."""
    before = [set(t.ev.chunks) for t in tabs]

    async def one(tab: Tab, seen: set[str]) -> float:
        t0 = time.monotonic_ns()
        sid = (await tab.send(text))["result"]["session_id"]
        await tab.ev.until(lambda: len(tab.ev.chunks) - len(seen) >= chunks
                           or sid in tab.ev.done_turns, 120)
        with contextlib.suppress(TimeoutError):
            await tab.ev.until(lambda: len(tab.ev.chunks) - len(seen) >= chunks, 0.5)
        fresh = [v for k, v in tab.ev.chunks.items() if k not in seen]
        LOST["ours"] += chunks - len(fresh)
        return (min(fresh) - t0) / NS if fresh else float("nan")

    ttfts = await asyncio.gather(*(one(t, s) for t, s in zip(tabs, before, strict=True)))
    emitted = ctx.stack.stamps()["emit"]
    lat = []
    for tab, seen in zip(tabs, before, strict=True):
        lat += _latencies({k: v for k, v in tab.ev.chunks.items() if k not in seen}, emitted)
    return lat, list(ttfts)


LOST = {"ours": 0, "baseline": 0}  # chunks that never arrived (per case, reset by it)


async def _relay_turns(ctx: Ctx, relays: list[Relay], text: str) -> tuple[list, list]:
    async def one(relay: Relay) -> float:
        sid = uuid.uuid4().hex
        seen = set(relay.chunks)
        t0 = time.monotonic_ns()
        await relay.send(text=text, sid=sid)
        await relay.until(lambda: sid in relay.ends, 120)
        fresh = [v for k, v in relay.chunks.items() if k not in seen]
        return (min(fresh) - t0) / NS

    seen = [set(r.chunks) for r in relays]
    ttfts = await asyncio.gather(*(one(r) for r in relays))
    emitted = ctx.stack.stamps()["emit"]
    lat = []
    for relay, old in zip(relays, seen, strict=True):
        lat += _latencies({k: v for k, v in relay.chunks.items() if k not in old}, emitted)
    return lat, list(ttfts)


async def chunks(ctx: Ctx) -> dict[str, Any]:
    """LLM chunk emitted -> client receives it: 200 chunks at 5 ms, one turn alone, then
    ``concurrent`` turns at once (each its own user), vs the bare relay."""
    n = ctx.opts.pick(200, 20)
    concurrent = ctx.opts.pick(6, 2)
    text = f"chunks {n} 5"
    users = ctx.users(concurrent)
    tabs = [await Tab(ctx.stack.ws_url, tok).open() for _, tok in users]
    relays = [await Relay(ctx.stack.bare_url("relay")).open() for _ in users]
    floor = (await Relay(ctx.stack.bare_url("floor")).open()
             if "floor" in ctx.stack.bare else None)
    out: dict[str, Any] = {"unit": "ms", "chunks_per_turn": n, "concurrent_turns": concurrent,
                           "ratios": []}
    LOST.update(ours=0, baseline=0)
    ttft_o, ttft_b, ttft_f = Side(), Side(), Side()
    try:
        for label, k in (("alone", 1), ("concurrent", concurrent)):
            async def ours(k: int = k, label: str = label) -> tuple[list[float], int]:
                lat, ttfts = await _ours_turns(ctx, tabs[:k], text, n)
                if label == "alone":
                    ttft_o.add(ttfts)
                return lat, n * k

            async def base(k: int = k, label: str = label) -> tuple[list[float], int]:
                lat, ttfts = await _relay_turns(ctx, relays[:k], text)
                if label == "alone":
                    ttft_b.add(ttfts)
                return lat, n * k

            async def durable() -> tuple[list[float], int]:  # its first chunk only
                assert floor is not None
                _, ttfts = await _relay_turns(ctx, [floor], text)
                ttft_f.add(ttfts)
                return [], 1

            runs = [(ours, ctx.stack.server_pids()), (base, [ctx.stack.bare["relay"].pid])]
            if floor is not None and label == "alone":
                runs.append((durable, [ctx.stack.bare["floor"].pid]))
            o, b, *_ = await alternate_many(ctx.opts.rounds, runs)
            so, sb = o.summary(), b.summary()
            out[label] = {"ours": so, "baseline": sb}
            out["ratios"] += [
                target(f"chunk {label} p50", ratio(so["p50"], sb["p50"]), 1.5),
                target(f"chunk {label} p99", ratio(so["p99"], sb["p99"]), 2),
            ]
        so, sb = ttft_o.summary(), ttft_b.summary()
        out["ttft"] = {"ours": so, "baseline": sb}
        out["ratios"].append(target("time to first chunk p50", ratio(so["p50"], sb["p50"]), 2))
        if floor is not None:
            sf = out["ttft"]["durable_floor"] = ttft_f.summary()
            out["ratios"].append(informational(
                "time to first chunk p50 against the durable floor", ratio(so["p50"], sf["p50"])))
        out["lost_chunks"] = dict(LOST)
    finally:
        for t in tabs:
            await t.close()
        for r in [*relays, *([floor] if floor is not None else [])]:
            await r.close()
    return out


# --- tool pause and resume ----------------------------------------------------------------------


TOOL_TIME = 0.05  # seconds the browser takes for the calls of ``tools``'s second measure


async def tools(ctx: Ctx) -> dict[str, Any]:
    """Pause: the model's last tool-call frame -> the browser holds the pending RTC. Resume: the
    result sent -> the model receives the next request. Vs the bare relay's checkpoint in Redis.

    The browser answers at once (the target's figures), and, informational, after
    ``TOOL_TIME`` for a few calls a round: a real tool takes a while, during which a worker
    either waits for it (``RTC_RESULT_WAIT``) or lets the turn go and resumes it later."""
    per_round = ctx.opts.pick(8, 2)
    slow_per_round = ctx.opts.pick(4, 1)
    ((_, token),) = ctx.users(1)
    tab = await Tab(ctx.stack.ws_url, token).open()
    relay = await Relay(ctx.stack.bare_url("relay")).open()
    floor = (await Relay(ctx.stack.bare_url("floor")).open()
             if "floor" in ctx.stack.bare else None)
    pause = (Side(), Side(), Side())  # ours, the relay, the durable floor
    resume = (Side(), Side(), Side())
    slow = (Side(), Side(), Side())  # resume after a ``TOOL_TIME`` tool

    def calls() -> list[float]:
        return [0.0] * per_round + [TOOL_TIME] * slow_per_round

    def add(sides: tuple[Side, Side, Side], index: int, sent: dict[str, tuple[int, float]],
            stamps: dict[str, dict[str, int]]) -> None:
        for side, tool in ((sides, 0.0), (slow, TOOL_TIME)):
            side[index].add([(stamps["resume"][c] - t) / NS for c, (t, took) in sent.items()
                             if took == tool and c in stamps["resume"]])

    async def ours() -> tuple[list[float], int]:
        sent: dict[str, tuple[int, float]] = {}
        for took in calls():
            known = len(tab.ev.rtcs)
            sid = (await tab.send("tool"))["result"]["session_id"]
            await tab.ev.until(lambda n=known: len(tab.ev.rtcs) > n)
            call = list(tab.ev.rtcs)[-1]
            rtc_id = tab.ev.rtcs[call][1]
            if took:
                await asyncio.sleep(took)
            sent[call] = (time.monotonic_ns(), took)
            await tab.client.rpc("v1.rtc.submit_result", {
                "rtc_id": rtc_id, "success": True, "result": "1\tbench",
                "client_id": str(uuid.uuid4())})
            await tab.ev.until(lambda s=sid: s in tab.ev.done_turns)  # one turn at a time
        stamps = ctx.stack.stamps()
        pause[0].add([(tab.ev.rtcs[c][0] - stamps["toolend"][c]) / NS for c in sent
                      if c in stamps["toolend"]])
        add(resume, 0, sent, stamps)
        return [], 2 * len(sent)

    def bare(relay: Relay, index: int) -> Callable[[], Awaitable[tuple[list[float], int]]]:
        async def run() -> tuple[list[float], int]:
            sent: dict[str, tuple[int, float]] = {}
            for took in calls():
                known = len(relay.rtcs)
                sid = uuid.uuid4().hex
                await relay.send(text="tool", sid=sid)
                await relay.until(lambda n=known: len(relay.rtcs) > n)
                call = list(relay.rtcs)[-1]
                if took:
                    await asyncio.sleep(took)
                sent[call] = (time.monotonic_ns(), took)
                await relay.send(text="tool", sid=sid + "r", resume=call, result="1\tbench")
                await relay.until(lambda s=sid + "r": s in relay.ends)
            stamps = ctx.stack.stamps()
            pause[index].add([(relay.rtcs[c] - stamps["toolend"][c]) / NS for c in sent
                              if c in stamps["toolend"]])
            add(resume, index, sent, stamps)
            return [], 2 * len(sent)
        return run

    runs = [(ours, ctx.stack.server_pids()), (bare(relay, 1), [ctx.stack.bare["relay"].pid])]
    if floor is not None:
        runs.append((bare(floor, 2), [ctx.stack.bare["floor"].pid]))
    try:
        sides = await alternate_many(ctx.opts.rounds, runs)
    finally:
        await tab.close()
        await relay.close()
        if floor is not None:
            await floor.close()
    cpu = {name: side.summary().get("cpu_per_op")
           for name, side in zip(("ours", "baseline", "durable_floor"), sides, strict=False)}
    out: dict[str, Any] = {"unit": "ms", "per_round": per_round, "ratios": [],
                           "cpu_per_pause_and_resume": cpu}
    slow_label = f"resume after a {TOOL_TIME * 1000:.0f} ms tool"
    for label, (po, pb, pf) in (("pause", pause), ("resume", resume), (slow_label, slow)):
        so, sb = po.summary(), pb.summary()
        key = "resume_after_tool" if label == slow_label else label
        out[key] = {"ours": so, "baseline": sb}
        name = f"tool {label} p50"
        out["ratios"].append(informational(name, ratio(so["p50"], sb["p50"]))
                             if key == "resume_after_tool"
                             else target(name, ratio(so["p50"], sb["p50"]), 2))
        if floor is not None:
            sf = out[key]["durable_floor"] = pf.summary()
            out["ratios"].append(informational(f"tool {label} p50 against the durable floor",
                                                ratio(so["p50"], sf["p50"])))
    out["tool_time_ms"] = TOOL_TIME * 1000
    return out


# --- idle connections ---------------------------------------------------------------------------


async def _open_many(make: Callable[[int], Awaitable[Any]], start: int, stop: int,
                     batch: int = 50) -> list[Any]:
    out: list[Any] = []
    for lo in range(start, stop, batch):
        out += await asyncio.gather(*(make(i) for i in range(lo, min(stop, lo + batch))))
    return out


async def idle(ctx: Ctx) -> dict[str, Any]:
    """Memory per authenticated idle connection and idle CPU, ramping the same levels on ours
    (the web process's RSS and CPU) and on the bare echo server. CPU is measured at the top
    level over one ping interval (each socket pings once, the process tick runs once) and scaled to
    production's 25 s interval and to 10,000 connections."""
    levels = ctx.opts.pick([1000, 2000], [20])
    window = ctx.opts.pick(ctx.stack.ping, 1.0)
    users = ctx.users(levels[-1])
    web, echo = ctx.stack.web, ctx.stack.bare["echo"]
    assert web is not None
    out: dict[str, Any] = {"levels": {}, "window_s": window, "ping_interval_s": ctx.stack.ping,
                           "ratios": []}

    async def ours_conn(i: int) -> RawClient:
        c = RawClient(ctx.stack.ws_url)
        await c.connect(users[i][1])
        return c

    async def echo_conn(i: int) -> Any:
        ws = await connect(ctx.stack.bare_url("echo"), compression=None, ping_interval=None,
                           max_size=None)
        await ws.send(orjson.dumps({"id": 1, "connect": {"token": users[i][1]}}).decode())
        await ws.recv()
        return ws

    for side, make, proc in (("ours", ours_conn, web), ("baseline", echo_conn, echo)):
        conns: list[Any] = []
        rss0 = proc_rss(proc.pid)
        for level in levels:
            t = time.perf_counter()
            conns += await _open_many(make, len(conns), level)
            ramp = time.perf_counter() - t
            await asyncio.sleep(ctx.opts.pick(1.0, 0.2))
            row = out["levels"].setdefault(str(level), {})[side] = {
                "bytes_per_conn": (proc_rss(proc.pid) - rss0) / level, "ramp_s": ramp}
            if level == levels[-1]:  # CPU over exactly one ping interval: every ping and tick
                cpu0 = proc_cpu([proc.pid])
                await asyncio.sleep(window)
                row["idle_cpu_core_share"] = (proc_cpu([proc.pid]) - cpu0) / window
        for c in conns:
            await c.close()
        await asyncio.sleep(ctx.opts.pick(1.0, 0.2))
    top = out["levels"][str(levels[-1])]
    mo, mb = top["ours"]["bytes_per_conn"], top["baseline"]["bytes_per_conn"]
    cpu = top["ours"]["idle_cpu_core_share"] * ctx.stack.ping / 25.0  # at production's pings
    out["ratios"] += [
        target(f"memory per connection at {levels[-1]}", ratio(mo, mb), 3),
        target(f"memory per connection at {levels[-1]}", mo / 1024, 48, unit=" KiB"),
        target(f"idle CPU at {levels[-1]}, scaled to 10k", cpu * 10000 / levels[-1] * 100, 5,
               unit=" % of a core"),
    ]
    return out


# --- sustained turns ----------------------------------------------------------------------------


async def sustained(ctx: Ctx) -> dict[str, Any]:
    """The highest concurrency at which p99 chunk latency stays <= 20 ms with no backlog (every
    first chunk within 500 ms of its request), 100 chunks at 50/s per turn, ours vs the relay."""
    levels = ctx.opts.pick([1, 2, 4, 8, 16, 32], [1, 2])
    n = ctx.opts.pick(100, 10)
    text = f"chunks {n} 20"
    users = ctx.users(levels[-1])
    tabs = [await Tab(ctx.stack.ws_url, tok).open() for _, tok in users]
    relays = [await Relay(ctx.stack.bare_url("relay")).open() for _ in users]
    out: dict[str, Any] = {"chunks_per_turn": n, "levels": {}, "ratios": []}
    capacity = {"ours": 0, "baseline": 0}
    LOST.update(ours=0, baseline=0)
    failed = {"ours": False, "baseline": False}
    try:
        for k in levels:
            for side in ("baseline", "ours"):
                if failed[side]:
                    continue
                for attempt in range(2):  # a level fails only twice in a row (a noisy host)
                    lost_before = LOST["ours"]
                    if side == "ours":
                        lat, ttfts = await _ours_turns(ctx, tabs[:k], text, n)
                    else:
                        lat, ttfts = await _relay_turns(ctx, relays[:k], text)
                    lost = LOST["ours"] - lost_before if side == "ours" else 0
                    p99, worst = percentile(lat, 0.99), max(ttfts)
                    ok = p99 <= 20 and worst <= 500 and not lost
                    out["levels"].setdefault(str(k), {})[side] = {
                        "p99_ms": p99, "max_ttft_ms": worst, "lost_chunks": lost, "ok": ok,
                        "attempts": attempt + 1}
                    if ok:
                        capacity[side] = k
                        break
                else:
                    failed[side] = True
    finally:
        for t in tabs:
            await t.close()
        for r in relays:
            await r.close()
    out["capacity"] = capacity
    # NaN when the relay itself met no level: the host was too busy to measure anything.
    value = ratio(capacity["ours"], capacity["baseline"]) if capacity["baseline"] else float("nan")
    out["ratios"].append(target("sustained capacity", value, 0.5, most=False))
    return out


# --- replay -------------------------------------------------------------------------------------


def _seed_history(user: Any, count: int) -> tuple[str, int]:
    """``count`` stored publications on the user's topic (an Update with one message each)."""
    from apps.gateway import stream
    from apps.gateway.models import TopicEvent
    from rtcagent import keys
    from rtcagent.redis import get_redis

    pos = stream.position(user.id)
    base = pos.offset
    rows = []
    for i in range(1, count + 1):
        mid = str(uuid.uuid4())
        data = {"id": str(uuid.uuid4()), "offset": base + i, "items": [
            {"entity": "message", "action": "created", "entity_id": mid}], "data_list": [
            {"id": mid, "role": "assistant", "content": {"type": "markdown",
                                                         "data": "bench text " * 20}}]}
        rows.append(TopicEvent(user_id=user.id, epoch=pos.epoch, offset=base + i, data=data))
    TopicEvent.objects.bulk_create(rows, batch_size=2000)
    get_redis().set(keys.topic_offset(user.id), base + count)
    return pos.epoch, base + count


async def replay(ctx: Ctx) -> dict[str, Any]:
    """Catching up 20k missed publications (history pages of 1,000) and 200 clients reconnecting
    at once 100 behind (recovery in the connect reply), vs a bare script reading the same rows
    from PostgreSQL and sending the same frames. Figures are publications per second."""
    total = ctx.opts.pick(20000, 300)
    clients = ctx.opts.pick(200, 5)
    behind = 100
    ((user, token),) = ctx.users(1)
    epoch, head = await asyncio.to_thread(_seed_history, user, total)
    channel = f"topic:u={user.id}"
    out: dict[str, Any] = {"unit": "publications/s", "missed": total, "clients": clients,
                           "behind": behind, "ratios": []}

    async def ours_catch_up() -> tuple[list[float], int]:
        c = RawClient(ctx.stack.ws_url)
        await c.connect(token)
        t, after, got = time.perf_counter(), head - total, 0
        while after < head:
            reply = await c.command({"history": {"channel": channel, "limit": 1000, "since": {
                "offset": after, "epoch": epoch}}})
            pubs = reply["history"].get("publications", [])
            if not pubs:
                break
            got += len(pubs)
            after = pubs[-1]["offset"]
        elapsed = time.perf_counter() - t
        await c.close()
        return [got / elapsed], got

    async def base_catch_up() -> tuple[list[float], int]:
        ws = await connect(ctx.stack.bare_url("replay"), compression=None, max_size=None)
        t, after, got = time.perf_counter(), head - total, 0
        while after < head:
            await ws.send(orjson.dumps({"id": 1, "user": user.id, "epoch": epoch,
                                        "after": after, "limit": 1000, "head": head}).decode())
            pubs = orjson.loads(await ws.recv())["history"]["publications"]
            if not pubs:
                break
            got += len(pubs)
            after = pubs[-1]["offset"]
        elapsed = time.perf_counter() - t
        await ws.close()
        return [got / elapsed], got

    subs = {channel: {"recover": True, "offset": head - behind, "epoch": epoch}}

    async def ours_burst() -> tuple[list[float], int]:
        async def one() -> tuple[RawClient, int]:
            c = RawClient(ctx.stack.ws_url)
            reply = await c.connect(token, subs)
            return c, len(reply["subs"][channel].get("publications", []))

        t = time.perf_counter()
        done = await asyncio.gather(*(one() for _ in range(clients)))
        elapsed = time.perf_counter() - t
        for c, _ in done:
            await c.close()
        got = sum(n for _, n in done)
        return [got / elapsed], got

    async def base_burst() -> tuple[list[float], int]:
        async def one() -> tuple[Any, int]:
            ws = await connect(ctx.stack.bare_url("replay"), compression=None, max_size=None)
            await ws.send(orjson.dumps({"id": 1, "user": user.id, "epoch": epoch,
                                        "after": head - behind, "limit": behind,
                                        "head": head}).decode())
            return ws, len(orjson.loads(await ws.recv())["history"]["publications"])

        t = time.perf_counter()
        done = await asyncio.gather(*(one() for _ in range(clients)))
        elapsed = time.perf_counter() - t
        for ws, _ in done:
            await ws.close()
        got = sum(n for _, n in done)
        return [got / elapsed], got

    ours_pids = [ctx.stack.web.pid] if ctx.stack.web else []
    for label, o_fn, b_fn in (("catch_up", ours_catch_up, base_catch_up),
                              ("reconnect_burst", ours_burst, base_burst)):
        rounds = ctx.opts.rounds
        o, b = await alternate(rounds, o_fn, b_fn, ours_pids, [ctx.stack.bare["replay"].pid])
        so, sb = o.summary(), b.summary()
        out[label] = {"ours": so, "baseline": sb}
        out["ratios"].append(target(f"replay {label} throughput", ratio(so["p50"], sb["p50"]),
                                    0.7, most=False))
    return out


# --- image --------------------------------------------------------------------------------------


async def image(ctx: Ctx) -> dict[str, Any]:
    """``bench/attachments_image.py`` folded in: a 12 MP JPEG through the attachment pipeline vs
    bare Pillow, and another session's chunk delays while 4 images process."""
    from bench import attachments_image as ai

    rounds = ctx.opts.pick(ctx.opts.rounds + 1, 2)
    size = ctx.opts.pick((4000, 3000), (800, 600))  # the smoke run: a small photo
    per = await asyncio.to_thread(ai.per_image, rounds, 1, size)
    cand, base = per["candidate"]["p50_s"], per["baseline"]["p50_s"]
    out: dict[str, Any] = {"per_image": per, "ratios": [target("image p50", ratio(cand, base),
                                                               1.5)]}
    if not ctx.opts.smoke:  # 200 chunks at 10 ms per stream: too long for the smoke run
        ai.CHUNKS = 60  # 0.6 s streams (the script's own default is 200): the 5-minute budget
        stream = await asyncio.to_thread(ai.chunk_latency, ctx.opts.rounds)
        out["chunks_while_images"] = stream
        out["ratios"].append(target("chunk p95 while 4 images process", stream["ratio_p95"],
                                    1.5))
    return out


CASES: dict[str, Callable[[Ctx], Awaitable[dict[str, Any]]]] = {
    "rpc": rpc, "chunks": chunks, "tools": tools, "sustained": sustained, "replay": replay,
    "idle": idle, "image": image, "live": interruption,
}


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=str)
