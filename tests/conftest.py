"""Shared fixtures: real Redis (``REDIS_URL``, else a Valkey of the test run's own) and the real
database.

A test run never touches the checkout's data: without ``REDIS_URL`` the settings give it a private
Valkey (``rtcagent.embedded.start_private_valkey``), and a SQLite test database lives in a
temporary folder of the run instead of ``var/``.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

_emails = itertools.count(1)
_run_dir: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Move a SQLite test database (and its -wal/-shm files) out of ``var/``; it is a file, not
    ``:memory:``, so that the servers the tests start share it."""
    global _run_dir
    from django.conf import settings

    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        _run_dir = Path(tempfile.mkdtemp(prefix="rtc-test-"))
        db["TEST"]["NAME"] = str(_run_dir / "test.sqlite3")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _run_dir is not None:
        shutil.rmtree(_run_dir, ignore_errors=True)


@pytest.fixture(autouse=True, scope="session")
def _flush_survives_deadlocks() -> Iterator[None]:
    """Worker processes keep polling the test database between tests; PostgreSQL may pick the
    TRUNCATE of pytest-django's flush as the victim of a lock cycle with one of their reads.
    Retry the flush then (the workers' reads are short) instead of failing the test."""
    from django.core.management.base import CommandError
    from django.core.management.commands import flush

    original = flush.Command.handle

    def handle(self: Any, **options: Any) -> Any:
        for attempt in range(6):
            try:
                return original(self, **options)
            except CommandError as exc:
                if "deadlock" not in str(exc.__cause__) or attempt == 5:
                    raise
                time.sleep(0.2 * (attempt + 1))
        return None

    flush.Command.handle = handle
    yield
    flush.Command.handle = original


@pytest.fixture(autouse=True)
def _clean_redis() -> Iterator[None]:
    """Every test starts on an empty Redis database (only the selected db index is flushed; without
    ``REDIS_URL`` it is the test run's own Valkey)."""
    from rtcagent.redis import get_redis

    get_redis().flushdb()
    yield


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    """Users are created by the hundred; the production hasher is slow on purpose."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(scope="session")
def llm() -> Iterator[Any]:
    """The project's scripted OpenAI-compatible server (a real HTTP server in a thread)."""
    from rtcagent.devtools.scripted_llm import ScriptedLLM

    with ScriptedLLM(api_key="sk-test-key") as server:
        yield server


@pytest.fixture
def model(llm: Any) -> Iterator[Any]:
    """The scripted model, reset for this test."""
    llm.reset()
    yield llm
    llm.reset()


@pytest.fixture
def redis_client() -> Any:
    from rtcagent.redis import get_redis

    return get_redis()


@pytest.fixture
def make_user(django_db_blocker: Any) -> Callable[..., Any]:
    """Create a user with a unique email (password ``pw-<email>``)."""
    from django.contrib.auth import get_user_model

    def make(email: str | None = None, **extra: Any) -> Any:
        email = email or f"user{next(_emails)}@example.com"
        with django_db_blocker.unblock():
            return get_user_model().objects.create_user(email, f"pw-{email}", **extra)

    return make
