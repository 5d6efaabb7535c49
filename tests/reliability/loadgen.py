"""Child process of the load tests: publish Updates for a slice of users at a steady rate.

Usage: python -m tests.reliability.loadgen FIRST_USER_ID LAST_USER_ID RATE SECONDS [THREADS]

With RATE 0, SECONDS is a count instead: that many Updates as fast as the threads can (a burst).

Each Update goes through ``publish_update`` in its own transaction (the production path: offset
from Redis, row in the database, bell after commit). ``THREADS`` threads publish concurrently, so
transactions of one user commit out of order as they do with several web and worker processes.
Prints ``{"published": N, "elapsed": seconds}`` as JSON at the end.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import django


def main() -> None:
    django.setup()
    from django.db import close_old_connections, transaction

    from apps.gateway.events import item, publish_update

    first, last, rate, seconds = (int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]),
                                  float(sys.argv[4]))
    threads = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    users = list(range(first, last + 1))
    published = [0] * threads
    stop = time.monotonic() + seconds  # (a rate run)

    burst = int(seconds) if rate <= 0 else 0

    def more(i: int) -> bool:
        return i < burst if burst else time.monotonic() < stop

    def run(n: int) -> None:
        interval = threads / rate if rate > 0 else 0.0
        next_at = time.monotonic()
        i = n
        while more(i):
            uid = users[i % len(users)]
            with transaction.atomic():
                publish_update(user_id=uid, items=[item("message", "updated", f"load-{i}")],
                               data_list=[{"i": i, "text": "x" * 200}])
            published[n] += 1
            i += threads
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        close_old_connections()

    if burst:  # start together with the other publishers: say ready, wait for the go line
        print("ready", flush=True)
        sys.stdin.readline()
        stop = time.monotonic() + seconds
    started = time.monotonic()
    workers = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print(json.dumps({"published": sum(published), "elapsed": time.monotonic() - started}))


if __name__ == "__main__":
    main()
