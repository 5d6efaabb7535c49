"""Shared fixtures: real Redis (``REDIS_URL`` or the embedded Valkey) and the real database."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

_emails = itertools.count(1)


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
    """Every test starts on an empty Redis database (only the selected db index is flushed)."""
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
