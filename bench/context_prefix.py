"""Benchmark: how much of each request repeats the previous one (the provider's prefix cache).

A scripted 40-turn conversation runs through the real worker code in this process (services,
``DjangoTurnPorts``, ``apps.turns.context``, the engine, ``OpenAIChat``) against the scripted
model over HTTP: user messages of varying length, reads and searches of 200 to 2,500 tokens,
a pinned memory and memories recalled every turn, and a 24K window so that auto compact runs
several times. Every request the model receives is kept.

Per consecutive pair of requests of the session (summary requests aside) it reports:

* the **message-level** shared prefix the engine records (``LLMCall.shared_prefix_ratio``:
  leading messages identical to the previous request's, tool list first);
* the **token-level** shared prefix measured here: the request serialised (tools, then
  messages) and tokenized with o200k_base, the common leading tokens counted;
* **cached tokens** as a provider with automatic prefix caching would report them (OpenAI's
  rule: the common prefix, if at least 1,024 tokens, in steps of 128; the scripted model
  reports none itself).

Candidate: the layout as built (volatile memory last, sticky microcompact). Baseline: the same
code with the naive choices: the recalled memory inside the system prompt, and microcompact on
every call (cache taken as always cold, so the kept window of outputs slides). They run
alternately, in rounds, against the configured database and Redis. Target: at least 75 % of
prompt tokens in the shared prefix across consecutive calls, compaction included.

Writes ``bench/results/context_prefix.json``.

    .venv/bin/python bench/context_prefix.py [--rounds 1] [--turns 40]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rtcagent.settings")

TARGET = 0.75
MODEL = "bench-context-model"
PROFILE = {"context_window": 16_000, "max_output_tokens": 2_000, "autocompact_buffer": 4_000,
           "tool_result_budget": 3_000, "keep_recent_tool_results": 5,
           "cache_cold_seconds": 300}
WORDS = ("widget session token compact cache prefix model browser file memory summary "
         "request answer tool result window budget layout stable volatile").split()


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def script(rng: random.Random, turns: int) -> list[dict[str, Any]]:
    """Per turn: the user's text, the tool calls the model makes, the results, the answer."""
    plan = []
    for n in range(turns):
        calls = []
        for k in range(rng.choice((0, 1, 1, 2, 3))):
            tool = rng.choice(("read", "grep", "read", "ls"))
            args = {"path": f"/src/file_{n}_{k}.py"} if tool == "read" else (
                {"pattern": f"def {rng.choice(WORDS)}"} if tool == "grep" else {"path": "/src"})
            size = rng.randint(150, 1800)
            result = "\n".join(f"{i:4d}  {text(rng, 10)}" for i in range(size // 12))
            calls.append((tool, args, result))
        plan.append({"user": f"Turn {n}: " + text(rng, rng.randint(10, 150)), "calls": calls,
                     "answer": f"Answer {n}: " + text(rng, rng.randint(20, 120))})
    return plan


def provider_bytes(body: dict[str, Any]) -> str:
    """What the provider renders first to last: the tool list, then the messages."""
    return json.dumps({"tools": body.get("tools"), "messages": body["messages"]},
                      ensure_ascii=False, separators=(",", ":"))


def run_variant(name: str, plan: list[dict[str, Any]], llm: Any) -> dict[str, Any]:
    from django.contrib.auth import get_user_model

    from apps.memory.services import user_memory_save
    from apps.ops.models import ModelPrice
    from apps.rtc.models import TERMINAL_RTC_STATUSES, Rtc
    from apps.rtc.services import rtc_submit_result
    from apps.sessions.models import Message
    from apps.sessions.services import message_send
    from apps.turns import context, tokens
    from apps.turns.llm import OpenAIChat
    from apps.turns.models import LLMCall
    from apps.turns.worker import Worker

    naive = name == "baseline"
    ModelPrice.objects.update_or_create(model=MODEL, defaults={
        "input_per_million": 1, "output_per_million": 4,
        **PROFILE, **({"cache_cold_seconds": 0} if naive else {})})
    original_system, original_recalled = context.TurnContext.system, context.TurnContext.recalled
    if naive:  # what a layout without a volatile tail does: memory in the system prompt
        def system(self: Any) -> str:
            return original_system(self) + "\n\n" + original_recalled(self)
        context.TurnContext.system = system
        context.TurnContext.recalled = lambda self: ""
    user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:8]}@localhost")
    user_memory_save(user_id=user.id, content="The user works on the widget's session view.",
                     category="project", importance="high")
    for word in WORDS[:8]:
        user_memory_save(user_id=user.id, content=f"Notes about the {word}: keep it short.",
                         category="reference", importance="medium")
    llm.reset()
    llm.add_rule({"system_contains": "You write summaries of conversations"},
                 {"content": "1. Primary request: improve the widget. 2. Concepts: caching. "
                             "7. Pending: the remaining turns. 8. Current work: the layout."})
    worker = Worker(llm_factory=lambda: OpenAIChat(api_key="sk-bench", base_url=llm.base_url,
                                                   model=MODEL, max_attempts=1))
    session_id = None
    started = time.perf_counter()
    try:
        for turn in plan:
            for n, (tool, args, _) in enumerate(turn["calls"]):
                llm.enqueue({"tool_calls": [{"id": f"call_{n}", "name": tool,
                                             "arguments": args}]})
            llm.enqueue({"content": turn["answer"]})
            sent = message_send(user_id=user.id, device_id="", client_id=str(uuid.uuid4()),
                                content={"type": "user_message", "data": {"text": turn["user"]}},
                                server_session_id=session_id)
            session_id = str(sent.session.id)
            worker.start_turn(session_id, {"message_id": str(sent.message.id)})
            for _, _, result in turn["calls"]:
                rtc = Rtc.objects.exclude(status__in=TERMINAL_RTC_STATUSES).get(
                    session_id=session_id)
                rtc_submit_result(user_id=user.id, rtc_id=rtc.id, success=True, result=result)
                worker.handle(session_id, {"kind": "resume", "turn_id": str(rtc.turn_id)})
    finally:
        context.TurnContext.system, context.TurnContext.recalled = (original_system,
                                                                    original_recalled)
    elapsed = time.perf_counter() - started
    bodies = [r.body for r in llm.requests
              if "You write summaries" not in r.body["messages"][0]["content"]]
    summaries = len(llm.requests) - len(bodies)
    calls = list(LLMCall.objects.filter(session_id=session_id).exclude(prompt_estimate=0)
                 .order_by("id"))
    assert len(calls) == len(bodies), (len(calls), len(bodies))
    encoded = [tokens.encoding().encode_ordinary(provider_bytes(b)) for b in bodies]
    rows = []
    for i in range(1, len(bodies)):
        before, now = encoded[i - 1], encoded[i]
        common = 0
        for a, b in zip(before, now, strict=False):
            if a != b:
                break
            common += 1
        cached = (common // 128) * 128 if common >= 1024 else 0
        rows.append({"call": i, "prompt_tokens": calls[i].prompt_estimate,
                     "message_level_shared": round(calls[i].shared_prefix_ratio or 0.0, 4),
                     "request_tokens": len(now), "token_level_shared": common,
                     "cached_tokens": cached})
    prompt_total = sum(r["prompt_tokens"] for r in rows)
    message_shared = sum(r["message_level_shared"] * r["prompt_tokens"] for r in rows)
    request_total = sum(r["request_tokens"] for r in rows)
    result = {
        "variant": name,
        "turns": len(plan),
        "requests": len(bodies),
        "summary_requests": summaries,
        "summaries_stored": Message.objects.filter(session_id=session_id,
                                                   content__type="summary").count(),
        "message_level_ratio": round(message_shared / prompt_total, 4),
        "token_level_ratio": round(sum(r["token_level_shared"] for r in rows) / request_total, 4),
        "cached_share": round(sum(r["cached_tokens"] for r in rows) / request_total, 4),
        "cached_tokens": sum(r["cached_tokens"] for r in rows),
        "prompt_tokens": prompt_total,
        "median_call_ratio": statistics.median(r["message_level_shared"] for r in rows),
        "min_call_ratio": min(r["message_level_shared"] for r in rows),
        "seconds": round(elapsed, 2),
        "calls": rows,
    }
    user.delete()
    return result


def main() -> None:
    import django

    django.setup()
    from django.core.management import call_command

    from apps.ops.models import ModelPrice
    from rtcagent.devtools.scripted_llm import ScriptedLLM

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    plan = script(random.Random(args.seed), args.turns)
    runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "candidate": []}
    with ScriptedLLM(models=(MODEL,)) as llm:
        try:
            for _ in range(args.rounds):
                for name in ("baseline", "candidate"):
                    runs[name].append(run_variant(name, plan, llm))
        finally:
            ModelPrice.objects.filter(model=MODEL).delete()
    report: dict[str, Any] = {
        "benchmark": "context_prefix",
        "target": f"token-weighted shared prefix across consecutive calls >= {TARGET:.0%}",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "platform": platform.platform()},
        "profile": PROFILE,
        "seed": args.seed,
    }
    for name, results in runs.items():
        keys = ("message_level_ratio", "token_level_ratio", "cached_share", "cached_tokens",
                "prompt_tokens", "requests", "summary_requests", "summaries_stored", "seconds")
        report[name] = {k: statistics.median(r[k] for r in results) for k in keys}
        report[name]["calls"] = results[-1]["calls"]
    cand, base = report["candidate"], report["baseline"]
    report["candidate_meets_target"] = cand["message_level_ratio"] >= TARGET and (
        cand["token_level_ratio"] >= TARGET)
    out = ROOT / "bench" / "results" / "context_prefix.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    for name, r in (("baseline", base), ("candidate", cand)):
        print(f"{name:9}  shared prefix: message-level {r['message_level_ratio']:.1%}, "
              f"token-level {r['token_level_ratio']:.1%}; cached (simulated) "
              f"{r['cached_tokens']} tokens = {r['cached_share']:.1%}; {r['requests']} calls, "
              f"{r['summary_requests']} summary calls, {r['summaries_stored']} summaries")
    print(f"target {TARGET:.0%}: {'met' if report['candidate_meets_target'] else 'NOT met'}; "
          f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
