"""The ``live`` case (issue 15): how fast an input interrupts a live call's running answer.

Server-side interruption latency: from the moment the server receives ``v1.channel.input`` to
(a) the old answer's model stream closed (the scripted model sees the client's close) and
(b) the new input's model request arriving at the scripted model. Target: both under 50 ms at
p99 (absolute: the issue names no baseline).

A round sets up what a voice plugin and the parent agent do: a fresh user, two realtime channels
(``v1.channel.register``), a parent session whose message the scripted model answers with an
``rt_children`` create call on them (``live IN OUT``, see ``bench.llm``), and the ``live.call``
publication of the running call. Then each input is ``chunks 200 20 TAG``: a slow answer (200
deltas 20 ms apart, pieces ``<TAG.i>``). Once the first piece of the running answer reaches the
client, the next input is sent, and so on: every input but the first interrupts one answer
mid-stream. The round ends by unregistering the input channel (the call stops and hands over to
its parent).

Clocks: the scripted model stamps ``request[TAG]`` and ``closed[TAG]`` with
``time.monotonic_ns`` (one clock for every process of the machine). The server's receipt of the
input is not observable from outside, so it is estimated as the client's send time plus half
the median round trip of a no-op RPC measured on the same connection in the same round (the
no-op's round trip includes its own transport through the web process both ways; half of it is the
one-way part). Figures measured from the send time itself are reported too (``from_send``).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import statistics
import time
import uuid
from typing import Any

from centrifuge import ReplyError, ServerPublicationContext

from bench.clients import Events, Tab
from bench.harness import NS, Ctx, informational, target
from bench.stats import Side, percentile, proc_cpu

CHUNKS, PACE_MS = 200, 20  # the answer each input starts: 4 s, so it is always cut mid-stream
NOOPS = 20  # no-op round trips per round, for the one-way estimate
LIMIT_MS = 50.0
_PIECE = re.compile(r"<([^<>.\s]+)\.\d{4}>")


class LiveEvents(Events):
    """A tab's events plus the live channel's: first piece of each tagged answer, calls, cuts."""

    def __init__(self) -> None:
        super().__init__()
        self.first_piece: dict[str, int] = {}  # tag -> when its first piece arrived
        self.calls: dict[str, dict[str, Any]] = {}  # live_call_id -> its last live.call
        self.interrupts: list[int] = []  # arrival times of channel.interrupt
        self.ended: dict[str, set[str]] = {}  # session -> ids of its ended turns

    async def on_publication(self, ctx: ServerPublicationContext) -> None:
        now = time.monotonic_ns()
        data = ctx.pub.data
        if ctx.channel.startswith("live:") and isinstance(data, dict):
            kind = data.get("type")
            if kind == "channel.output":
                for tag in _PIECE.findall(str(data.get("delta", ""))):
                    self.first_piece.setdefault(tag, now)
            elif kind == "live.call":
                self.calls[str(data.get("live_call_id"))] = data
            elif kind == "channel.interrupt":
                self.interrupts.append(now)
        elif isinstance(data, dict) and data.get("items"):
            for it, entity in zip(data["items"], data["data_list"], strict=False):
                if it["entity"] == "turn" and entity.get("status") in ("completed", "failed"):
                    self.ended.setdefault(entity["session_id"], set()).add(entity["id"])
        await super().on_publication(ctx)

    def call_on(self, channel: str, status: str) -> dict[str, Any] | None:
        return next((c for c in self.calls.values() if c.get("input_channel") == channel
                     and c.get("status") == status), None)


async def _noop_half_rtt(tab: Tab) -> float:
    """Half the median round trip (ns) of a no-op RPC: a method that does not exist."""
    samples = []
    for _ in range(NOOPS):
        t = time.monotonic_ns()
        with contextlib.suppress(ReplyError):
            await tab.client.rpc("v1.bench.noop", {})
        samples.append(time.monotonic_ns() - t)
    return statistics.median(samples) / 2


async def _input(tab: Tab, channel: str, tag: str) -> dict[str, Any]:
    reply = await tab.client.rpc("v1.channel.input", {
        "name": channel, "text": f"chunks {CHUNKS} {PACE_MS} {tag}",
        "client_id": str(uuid.uuid4())})
    return reply.data


async def _call(tab: Tab, ev: LiveEvents, key: str) -> tuple[str, str, str]:
    """Register the channels and have the parent agent create the call: (in, out, parent)."""
    inch, outch = f"bench-in-{key}", f"bench-out-{key}"
    for name, direction in ((inch, "in"), (outch, "out")):
        await tab.client.rpc("v1.channel.register",
                             {"name": name, "direction": direction, "realtime": True})
    parent = (await tab.send(f"live {inch} {outch}"))["result"]["session_id"]
    await ev.until(lambda: ev.call_on(inch, "running") is not None, 60)
    await ev.until(lambda: parent in ev.ended, 60)  # the parent's turn (tool result, "ok") ended
    return inch, outch, parent


async def _round(ctx: Ctx, count: int) -> dict[str, Any]:
    """One round: a fresh user and call, then ``count`` interrupting inputs."""
    ((_, token),) = ctx.users(1)
    ev = LiveEvents()
    tab = await Tab(ctx.stack.ws_url, token, ev).open()
    key = uuid.uuid4().hex[:8]
    tags = [f"{key}-{k}" for k in range(count + 1)]
    sent: dict[str, int] = {}
    answered: dict[str, int] = {}
    cut = 0
    try:
        half = await _noop_half_rtt(tab)
        inch, _, parent = await _call(tab, ev, key)
        for _ in range(50):  # the call's first input: delivered once the call reads its channel
            if (await _input(tab, inch, tags[0]))["delivered"]:
                break
            await asyncio.sleep(0.02)
        else:
            raise RuntimeError(f"the live call never read its input channel {inch}")
        await ev.until(lambda: tags[0] in ev.first_piece, 30)
        cpu0 = proc_cpu(ctx.stack.server_pids())
        for tag in tags[1:]:
            sent[tag] = time.monotonic_ns()
            reply = await _input(tab, inch, tag)
            answered[tag] = time.monotonic_ns()
            cut += bool(reply.get("interrupted"))
            await ev.until(lambda t=tag: t in ev.first_piece, 30)
        cpu = (proc_cpu(ctx.stack.server_pids()) - cpu0) / count
        handed = len(ev.ended.get(parent, ()))
        await tab.client.rpc("v1.channel.unregister", {"name": inch})
        with contextlib.suppress(TimeoutError):  # the hand-over's parent turn, off the clock
            await ev.until(lambda: len(ev.ended.get(parent, ())) > handed, 30)
    finally:
        await tab.close()
    stamps = ctx.stack.stamps()
    out: dict[str, Any] = {"closed": [], "request": [], "closed_from_send": [],
                           "request_from_send": [], "first_piece": [], "notice": [],
                           "rpc_reply": [], "interrupted_replies": cut, "missing": 0,
                           "half_noop_rtt_ms": half / NS, "cpu_per_interrupt_ms": cpu * 1000}
    for k, tag in enumerate(tags[1:], 1):
        t0, old = sent[tag], tags[k - 1]
        est = t0 + half
        closed, request = stamps["closed"].get(old), stamps["request"].get(tag)
        if closed is None or request is None:
            out["missing"] += 1
            continue
        out["closed"].append((closed - est) / NS)
        out["request"].append((request - est) / NS)
        out["closed_from_send"].append((closed - t0) / NS)
        out["request_from_send"].append((request - t0) / NS)
        out["first_piece"].append((ev.first_piece[tag] - est) / NS)
        out["rpc_reply"].append((answered[tag] - t0) / NS)
        nxt = sent.get(tags[k + 1]) if k < count else None
        notice = [t for t in ev.interrupts if t >= t0 and (nxt is None or t < nxt)]
        if notice:
            out["notice"].append((min(notice) - est) / NS)
    return out


async def interruption(ctx: Ctx) -> dict[str, Any]:
    """Input received -> (a) the old stream closed, (b) the new request at the model, in ms."""
    count = ctx.opts.pick(11, 3)  # 5 kept rounds: 55 samples
    # the first round, shorter, warms the call path up and is discarded
    rounds = [await _round(ctx, ctx.opts.pick(4, 2))]
    rounds += [await _round(ctx, count) for _ in range(ctx.opts.rounds)]
    kept = rounds[1:]
    out: dict[str, Any] = {
        "unit": "ms", "per_round": count, "answer": f"{CHUNKS} chunks at {PACE_MS} ms",
        "origin": "client send time + half the median no-op RPC round trip (same connection, "
                  "same round); *_from_send: from the send time itself",
        "missing": sum(r["missing"] for r in kept),
        "interrupted_replies": sum(r["interrupted_replies"] for r in kept),
        "half_noop_rtt_ms": statistics.median(r["half_noop_rtt_ms"] for r in kept),
        "cpu_per_interrupt_ms": statistics.median(r["cpu_per_interrupt_ms"] for r in kept),
        "ratios": []}
    labels = {"closed": "cut: old stream closed", "request": "cut: new request at model",
              "closed_from_send": "", "request_from_send": "",
              "first_piece": "cut: new answer at client", "notice": "", "rpc_reply": ""}
    for name in labels:
        side = Side()
        for r in rounds:
            side.add(r[name])
        pooled = [x for r in kept for x in r[name]]
        out[name] = {**side.summary(), "all_samples": len(pooled),
                     "all_p50": percentile(pooled, 0.5), "all_p99": percentile(pooled, 0.99),
                     "all_max": max(pooled, default=float("nan"))}
    for name in ("closed", "request"):  # p99 over every kept sample (a round has only 11)
        out["ratios"].append(target(f"live {labels[name]} p99", out[name]["all_p99"], LIMIT_MS,
                                    unit=" ms"))
    for name in ("closed", "request", "first_piece"):
        out["ratios"].append(informational(f"live {labels[name]} p50", out[name]["all_p50"]))
    return out
