"""The image process pool: lower priority, a memory cap, deadlines and dead processes, none of
which takes the other jobs of a batch down."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apps.attachments.imaging import ImageRefused, ImageResult, Limits, process_image
from apps.attachments.pool import ImagePool, JobDied, JobTimedOut
from tests.attachments import samples


@pytest.fixture
def pool() -> Iterator[ImagePool]:
    made = ImagePool(workers=2, timeout=5.0, memory_bytes=1024**3)
    yield made
    made.shutdown()


def _jpeg() -> tuple:
    return (process_image, (samples.jpeg_with_orientation(6), "JPEG", Limits()))


def _one(pool: ImagePool) -> object:
    fn, args = _jpeg()
    return pool.run(fn, *args)


def test_jobs_run_in_lower_priority_processes_with_a_memory_cap(pool: ImagePool) -> None:
    result = _one(pool)
    assert isinstance(result, ImageResult) and (result.width, result.height) == (200, 400)
    pids = pool.pids()
    assert pids and os.getpid() not in pids
    for pid in pids:
        nice = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])
        assert nice == os.nice(0) + 10
        limits = Path(f"/proc/{pid}/limits").read_text()
        line = next(x for x in limits.splitlines() if x.startswith("Max address space"))
        assert line.split()[3:5] == [str(1024**3), str(1024**3)]


def test_a_refusal_comes_back_as_the_jobs_own_error(pool: ImagePool) -> None:
    bomb = (process_image, (samples.png_claiming(100_000, 100_000), "PNG", Limits()))
    first, second = pool.map([bomb, _jpeg()])
    assert isinstance(first, ImageRefused) and "too many pixels" in str(first)
    assert isinstance(second, ImageResult)


def test_a_job_past_its_deadline_is_killed_and_the_others_still_finish(pool: ImagePool) -> None:
    pool.timeout = 3.0
    outcomes = pool.map([(time.sleep, (60,)), _jpeg(), _jpeg(), _jpeg()])
    assert isinstance(outcomes[0], JobTimedOut)
    assert all(isinstance(o, ImageResult) for o in outcomes[1:])
    assert isinstance(_one(pool), ImageResult)  # a new pool took over


def test_a_job_that_kills_its_process_fails_alone(pool: ImagePool) -> None:
    outcomes = pool.map([_jpeg(), (os._exit, (3,)), _jpeg(), _jpeg()])
    assert isinstance(outcomes[1], JobDied)
    assert [type(o) for o in outcomes[::2]] == [ImageResult, ImageResult]
    assert isinstance(outcomes[3], ImageResult)


def test_memory_beyond_the_cap_fails_the_job_not_the_worker(pool: ImagePool) -> None:
    (outcome,) = pool.map([(bytearray, (2 * 1024**3,))])
    assert isinstance(outcome, MemoryError | JobDied)
    assert isinstance(_one(pool), ImageResult)


OWNER = """
import json, time
from apps.attachments.pool import ImagePool
pool = ImagePool(workers=2)
pool.map([(time.sleep, (0.1,)), (time.sleep, (0.1,))])
print(json.dumps(pool.pids()), flush=True)
time.sleep(120)
"""


def test_pool_processes_end_with_their_killed_owner() -> None:
    import json
    import signal
    import subprocess
    import sys

    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[2])
    assert owner.stdout is not None
    pids = json.loads(owner.stdout.readline())
    assert len(pids) == 2 and all(Path(f"/proc/{pid}").exists() for pid in pids)
    owner.send_signal(signal.SIGKILL)  # no clean-up of any kind
    owner.wait(10)
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]
