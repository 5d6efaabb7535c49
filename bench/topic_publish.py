"""Benchmark: the cost of a durable, ordered topic publication.

Candidate: ``publish_update`` (Redis offset allocation + row insert + bell after commit).
Baseline: the same row insert with an offset counted in the process (no Redis, no bell), i.e.
what storing an event costs anyway. The two run alternately, in rounds, in one process, against
the configured database and Redis; the report is the median time per publication and the ratio.

    .venv/bin/python bench/topic_publish.py [--rounds 7] [--per-round 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rtcagent.settings")


def main() -> None:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import transaction

    from apps.gateway.events import item, publish_update
    from apps.gateway.models import TopicEvent

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--per-round", type=int, default=200)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    user, _ = get_user_model().objects.get_or_create(email="bench@localhost")
    payload = {"items": [item("message", "updated", "m")], "data_list": [{"text": "x" * 200}]}
    counter = [10**9]

    def baseline() -> None:
        with transaction.atomic():
            counter[0] += 1
            TopicEvent.objects.create(user=user, epoch="bench", offset=counter[0], data=payload)

    def candidate() -> None:
        with transaction.atomic():
            publish_update(user_id=user.id, **payload)

    results: dict[str, list[float]] = {"baseline": [], "candidate": []}
    for _ in range(args.rounds):
        for name, fn in (("baseline", baseline), ("candidate", candidate)):
            start = time.perf_counter()
            for _ in range(args.per_round):
                fn()
            results[name].append((time.perf_counter() - start) / args.per_round)
    TopicEvent.objects.filter(user=user).delete()
    base = statistics.median(results["baseline"])
    cand = statistics.median(results["candidate"])
    print(f"baseline  (insert only)    {base * 1e6:8.1f} us/publication")
    print(f"candidate (publish_update) {cand * 1e6:8.1f} us/publication")
    print(f"ratio candidate/baseline   {cand / base:8.2f}")


if __name__ == "__main__":
    main()
