"""Shared fixtures: real Redis (``REDIS_URL``, else a Valkey of the test run's own) and the real
database.

A test run never touches the checkout's data: without ``REDIS_URL`` the settings give it a private
Valkey (``rtcagent.embedded.start_private_valkey``), and a SQLite test database lives in a
temporary folder of the run instead of ``var/``.
"""

from __future__ import annotations

import itertools
import os
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


# Files of a minute or more with few tests: a fresh virtualenv, a property test of 40 runs,
# processes killed and restarted, load, builds. Run first under xdist.
LONG_FILES = (
    "tests/test_make_run_nonroot.py",
    "tests/turns/test_invariant_property.py",
    "tests/reliability/test_process_faults.py",
    "tests/reliability/test_load.py",
    "tests/test_bench_smoke.py",
    "tests/test_deploy_rehearsal.py",
    "tests/browser/test_deploy_rehearsal.py",
    "tests/browser/test_screenshots.py",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker, the order in which the processes get the files (see
    ``tests/parallel.py``): ``LONG_FILES``, then the others by their number of tests, most
    first (xdist's own order), so that both processes end at about the same time. Each file
    keeps its tests in their order. Without xdist the order stays as collected."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    order = sorted(files, key=lambda name: (rank.get(name, len(rank)), -len(files[name])))
    items[:] = [item for name in order for item in files[name]]


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """pytest-django's test database, on PostgreSQL with ``synchronous_commit`` off for every
    session (the test process's, and its servers' and workers' when they connect): a commit
    then returns without waiting for its WAL flush, a few milliseconds each on a busy disk, over
    tens of thousands of commits a run. Readers see the same data at the same moment; only a
    crash of the PostgreSQL server could lose the last commits, and the tests that crash one
    run their own cluster (``tests/reliability/pgcluster.py``).

    At the end, the connection of asgiref's one sync thread (async tests' ``sync_to_async``
    calls: ``make_user``, the test client) is closed: it outlives the tests (connections are
    persistent), and PostgreSQL refuses to drop a database someone is connected to, which
    cost each xdist process a 16-second wait and a warning."""
    from asgiref.sync import SyncToAsync
    from django.db import DatabaseError, connection, connections

    if connection.vendor == "postgresql":
        name = connection.ops.quote_name(connection.settings_dict["NAME"])
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            try:
                cursor.execute(f"ALTER DATABASE {name} SET synchronous_commit = off")
                cursor.execute("SET synchronous_commit = off")
            except DatabaseError:  # not the database's owner: commits wait for the disk
                pass
    yield
    SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=30)


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


@pytest.fixture(autouse=True, scope="session")
def _flush_deletes_rows() -> Iterator[None]:
    """The flush after each transactional test empties PostgreSQL's tables with DELETE instead
    of TRUNCATE: TRUNCATE gives every table and index new files and unlinks the old ones, some
    0.15 to 0.3 s a flush (hundreds of flushes a run), where the DELETE of a test's few rows
    takes milliseconds. The tables are locked first, all in one statement as TRUNCATE does, so
    that no process writes between two DELETEs; the mode (EXCLUSIVE) still lets workers read.
    Django's foreign keys are deferrable, checked at the flush's commit when every table is
    empty. Sequences restart (TRUNCATE) only when a test asks for that."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    original = DatabaseOperations.sql_flush

    def sql_flush(self: Any, style: Any, tables: list[str], *, reset_sequences: bool = False,
                  allow_cascade: bool = False) -> list[str]:
        if reset_sequences or not tables:
            return original(self, style, tables, reset_sequences=reset_sequences,
                            allow_cascade=allow_cascade)
        names = [self.quote_name(table) for table in tables]
        return [f"LOCK TABLE {', '.join(names)} IN EXCLUSIVE MODE;",
                "SET CONSTRAINTS ALL DEFERRED;",
                *(f"DELETE FROM {name};" for name in names)]  # noqa: S608 (quoted names)

    DatabaseOperations.sql_flush = sql_flush
    yield
    DatabaseOperations.sql_flush = original


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
