"""Benchmark: a 12-megapixel photo through the attachment pipeline, and what it costs others.

1. **Per image.** Candidate: ``process_image`` run by the image pool (``apps.attachments.pool``),
   the very call the worker makes (bytes to a niced, memory-capped process and the result back).
   Baseline: a bare Pillow script doing the same steps in this process (open, ``exif_transpose``,
   ``thumbnail`` to 2000, JPEG quality 80, base64). A 4000x3000 JPEG with EXIF orientation 6.
   They run alternately in rounds (the first round is a warm-up and is discarded); reported are
   the median of the round medians, their spread (min..max), the CPU time per image (this
   process from ``getrusage``, the pool's processes from ``/proc/<pid>/stat``) and the ratio,
   with its target (p50 <= 1.5x).
2. **Another session's chunks.** A scripted model (``rtcagent.devtools.scripted_llm``) streams
   to a consumer in another process (``OpenAIChat``, as a worker streams); the consumer records
   the delay between chunks. Rounds alternate "quiet" and "4 images in the pool"; reported are
   the p50/p95/max inter-chunk delay of each and their ratios.

Needs neither a database nor Redis. Writes ``bench/results/attachments_image.json``.

    .venv/bin/python bench/attachments_image.py [--rounds 7] [--per-round 3] [--stream-rounds 5]
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET_RATIO = 1.5
CHUNKS = 200  # per stream
CHUNK_DELAY = 0.01  # the model's pace: a chunk every 10 ms
CONSUMER = r"""
import json, sys, time
from apps.turns.llm import OpenAIChat, TextDelta
chat = OpenAIChat(api_key="sk-bench", base_url=sys.argv[1], model="scripted-model", timeout=60)
print("ready", flush=True)
sys.stdin.readline()
stamps = [time.perf_counter() for e in chat.stream(
    [{"role": "user", "content": "stream please"}], None) if isinstance(e, TextDelta)]
print(json.dumps([b - a for a, b in zip(stamps, stamps[1:])]), flush=True)
"""


def photo(size: tuple[int, int] = (4000, 3000)) -> bytes:
    """A 4000x3000 JPEG (12 MP) of smooth gradients and noise, EXIF orientation 6."""
    from PIL import Image, ImageFilter

    noise = Image.effect_noise(size, 60).filter(ImageFilter.GaussianBlur(2))
    gradient = Image.linear_gradient("L").resize(size)
    img = Image.merge("RGB", (gradient, noise, gradient.transpose(Image.Transpose.ROTATE_180)))
    exif = Image.Exif()
    exif[0x0112] = 6
    out = io.BytesIO()
    img.save(out, "JPEG", quality=92, exif=exif)
    return out.getvalue()


def bare_pillow(data: bytes) -> str:
    """The baseline: the same steps with nothing around them."""
    from PIL import Image, ImageOps

    with Image.open(io.BytesIO(data)) as img:
        img = ImageOps.exif_transpose(img)
        img.thumbnail((2000, 2000), Image.Resampling.LANCZOS)
        out = io.BytesIO()
        img.convert("RGB").save(out, "JPEG", quality=80)
    return base64.b64encode(out.getvalue()).decode("ascii")


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def pool_cpu(pids: list[int]) -> float:
    """utime + stime of the pool's processes, in seconds."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def per_image(rounds: int, per_round: int, size: tuple[int, int] = (4000, 3000)) -> dict[str, Any]:
    from apps.attachments.imaging import Limits, process_image
    from apps.attachments.pool import ImagePool

    data = photo(size)
    pool = ImagePool()
    limits = Limits()
    pool.run(process_image, data, "JPEG", limits)  # start the processes before timing
    times: dict[str, list[float]] = {"baseline": [], "candidate": []}
    cpu: dict[str, list[float]] = {"baseline": [], "candidate": []}
    sizes: dict[str, int] = {}
    try:
        for n in range(rounds):
            for name in ("baseline", "candidate"):
                laps: list[float] = []
                pids = pool.pids()
                cpu0, pcpu0 = own_cpu(), pool_cpu(pids)
                for _ in range(per_round):
                    start = time.perf_counter()
                    if name == "baseline":
                        sizes[name] = len(bare_pillow(data))
                    else:
                        result = pool.run(process_image, data, "JPEG", limits)
                        sizes[name] = len(base64.b64encode(result.jpeg))
                    laps.append(time.perf_counter() - start)
                used = own_cpu() - cpu0 + pool_cpu(pids) - pcpu0
                if n:  # round 0 warms caches up: discarded
                    times[name].append(statistics.median(laps))
                    cpu[name].append(used / per_round)
    finally:
        pool.shutdown()
    report: dict[str, Any] = {"input_bytes": len(data), "source": f"{size[0]}x{size[1]}, EXIF 6"}
    for name in times:
        report[name] = {
            "p50_s": statistics.median(times[name]),
            "spread_s": [min(times[name]), max(times[name])],
            "cpu_s_per_image": statistics.median(cpu[name]),
            "base64_bytes": sizes[name],
        }
    report["ratio_p50"] = report["candidate"]["p50_s"] / report["baseline"]["p50_s"]
    report["ratio_cpu"] = (report["candidate"]["cpu_s_per_image"]
                           / report["baseline"]["cpu_s_per_image"])
    report["target_ratio_p50"] = TARGET_RATIO
    return report


def start_model() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(  # noqa: S603 - this interpreter, fixed arguments
        [sys.executable, "-m", "rtcagent.devtools.scripted_llm", "--port", "0",
         "--chunk-delay", str(CHUNK_DELAY), "--chunk-size", "1"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, line.strip().rsplit(" ", 1)[-1]


def stream_gaps(base_url: str, images: Callable[[], int] | None = None,
                ) -> tuple[list[float], int]:
    """The inter-chunk delays of one stream seen by a consumer process; with ``images`` (a
    callable running a batch of four), batches run back to back for the whole stream. Returns
    the delays and the number of images processed meanwhile."""
    import threading
    import urllib.request

    reply = json.dumps({"content": "x" * (CHUNKS + 1), "chunk_size": 1}).encode()
    request = urllib.request.Request(  # noqa: S310 - the local scripted model
        base_url.removesuffix("/v1") + "/__scripted__/replies", data=reply,
        headers={"Content-Type": "application/json"}, method="POST")
    urllib.request.urlopen(request, timeout=10).close()  # noqa: S310
    consumer = subprocess.Popen(  # noqa: S603 - this interpreter, our script
        [sys.executable, "-c", CONSUMER, base_url], cwd=ROOT, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert consumer.stdin is not None and consumer.stdout is not None
    assert consumer.stdout.readline().strip() == "ready"  # imports done: time the stream only
    stop = threading.Event()
    done = [0]

    def keep_busy() -> None:
        while images is not None and not stop.is_set():
            done[0] += images()

    side = threading.Thread(target=keep_busy) if images else None
    if side:
        side.start()
        time.sleep(0.2)  # the four jobs are decoding when the stream starts
    consumer.stdin.write("go\n")
    consumer.stdin.flush()
    gaps = json.loads(consumer.stdout.readline())
    stop.set()
    if side:
        side.join()
    consumer.wait(10)
    return gaps, done[0]


def chunk_latency(rounds: int) -> dict[str, Any]:
    from apps.attachments.imaging import Limits, process_image
    from apps.attachments.pool import ImagePool

    data = photo()
    pool = ImagePool()
    pool.run(process_image, data, "JPEG", Limits())

    def four() -> int:
        return len(pool.map([(process_image, (data, "JPEG", Limits()))] * 4))

    model, base_url = start_model()
    gaps: dict[str, list[float]] = {"quiet": [], "with_4_images": []}
    images = 0
    try:
        stream_gaps(base_url)  # warm-up
        for _ in range(rounds):
            gaps["quiet"] += stream_gaps(base_url)[0]
            busy, count = stream_gaps(base_url, four)
            gaps["with_4_images"] += busy
            images += count
    finally:
        model.terminate()
        model.wait(10)
        pool.shutdown()

    def summary(values: list[float]) -> dict[str, float]:
        values = sorted(values)
        return {"p50_ms": 1000 * statistics.median(values),
                "p95_ms": 1000 * values[int(0.95 * (len(values) - 1))],
                "max_ms": 1000 * values[-1], "chunks": len(values)}

    report: dict[str, Any] = {name: summary(values) for name, values in gaps.items()}
    report["ratio_p50"] = report["with_4_images"]["p50_ms"] / report["quiet"]["p50_ms"]
    report["ratio_p95"] = report["with_4_images"]["p95_ms"] / report["quiet"]["p95_ms"]
    report["model_chunk_delay_ms"] = CHUNK_DELAY * 1000
    report["images_processed_during_streams"] = images
    return report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--per-round", type=int, default=3)
    parser.add_argument("--stream-rounds", type=int, default=5)
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds: at least 2 (the first is a warm-up)")

    image = per_image(args.rounds, args.per_round)
    b, c = image["baseline"], image["candidate"]
    print(f"12 MP JPEG, EXIF 6 -> 2000 px, JPEG 80, base64 ({args.rounds - 1} rounds of "
          f"{args.per_round}, warm-up discarded)")
    for name, r in (("baseline  (bare Pillow)", b), ("candidate (pool)      ", c)):
        print(f"  {name} p50 {r['p50_s'] * 1000:7.1f} ms  spread "
              f"{r['spread_s'][0] * 1000:.1f}..{r['spread_s'][1] * 1000:.1f} ms  "
              f"cpu {r['cpu_s_per_image'] * 1000:7.1f} ms/image")
    verdict = "ok" if image["ratio_p50"] <= TARGET_RATIO else "OVER TARGET"
    print(f"  ratio candidate/baseline p50 {image['ratio_p50']:.2f} (target <= {TARGET_RATIO}: "
          f"{verdict}), cpu {image['ratio_cpu']:.2f}")

    stream = chunk_latency(args.stream_rounds)
    print(f"chunk delay of another session's stream (model pace {CHUNK_DELAY * 1000:.0f} ms, "
          f"{args.stream_rounds} rounds)")
    for name in ("quiet", "with_4_images"):
        r = stream[name]
        print(f"  {name:14s} p50 {r['p50_ms']:6.2f} ms  p95 {r['p95_ms']:6.2f} ms  "
              f"max {r['max_ms']:7.2f} ms  ({r['chunks']} chunks)")
    print(f"  ratio with/without images p50 {stream['ratio_p50']:.2f}, "
          f"p95 {stream['ratio_p95']:.2f}")

    out = ROOT / "bench" / "results" / "attachments_image.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "benchmark": "attachments_image",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "args": vars(args),
        "per_image": image,
        "chunk_latency": stream,
    }, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
