"""Isolation of pytest-xdist workers (``make test`` runs ``-n 2``), loaded with ``-p`` before the
settings so that each worker gets its own Redis database and its own var folder.

pytest-django already gives each worker its own test database (``test_<name>_gw<n>``). What it
cannot know: Redis is flushed before every test (``tests/conftest.py``), so two workers on one
Redis database would wipe each other's queues; and the object folder, keys and secret of a test
run live under ``RTC_VAR_DIR``, where user ids of two databases would meet (``user-16/`` of
both). Worker ``gw<n>`` therefore uses Redis database ``base + n`` and a var folder of its own.

The controller of ``--dist loadfile`` hands the files out in collection order, which
``tests/conftest.py`` arranges (the longest first), instead of xdist's default, most tests first:
that one starts the files of one long test last, and one process then ends the run alone with
one of them while the other has nothing left. Without xdist this module does nothing.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from urllib.parse import urlsplit, urlunsplit

import pytest

_worker = os.environ.get("PYTEST_XDIST_WORKER", "")


def _shifted(url: str, by: int) -> str:
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{base + by}"))


if _worker.startswith("gw"):
    index = int(_worker[2:])
    if os.environ.get("REDIS_URL"):  # else each process starts a Valkey of its own
        os.environ["REDIS_URL"] = _shifted(os.environ["REDIS_URL"], index)
    _var = tempfile.mkdtemp(prefix=f"rtcagent-test-var-{_worker}-")
    os.environ["RTC_VAR_DIR"] = _var
    atexit.register(shutil.rmtree, _var, True)


def pytest_configure(config: pytest.Config) -> None:
    if not _worker and getattr(config.option, "dist", "no") == "loadfile":
        config.option.loadscopereorder = False
