"""The PostgreSQL backend's health check on the socket (``rtcagent.pgbackend``): a persistent
connection that is fine is used without ``SELECT 1``; one that PostgreSQL closed is replaced
before the request's query, which succeeds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connections

from rtcagent.pgbackend.base import DatabaseWrapper

pytestmark = pytest.mark.django_db


@pytest.fixture
def persistent(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[DatabaseWrapper, list[int]]]:
    """A second connection to the test database as production configures it (persistent,
    health-checked), and the list of times Django's own check (``SELECT 1``) ran."""
    if connections["default"].vendor != "postgresql":
        pytest.skip("the PostgreSQL backend (DATABASE_URL is not PostgreSQL)")
    settings = {**connections["default"].settings_dict, "CONN_MAX_AGE": 60,
                "CONN_HEALTH_CHECKS": True}
    wrapper = DatabaseWrapper(settings, alias="persistent")
    checks: list[int] = []
    real = DatabaseWrapper.is_usable

    def counted(self: Any) -> bool:
        checks.append(1)
        return real(self)

    monkeypatch.setattr(DatabaseWrapper, "is_usable", counted)
    try:
        yield wrapper, checks
    finally:
        wrapper.close()


def _request(wrapper: DatabaseWrapper) -> tuple[int, int]:
    """What a request does: old connections checked, then a query (its backend's pid)."""
    wrapper.close_if_unusable_or_obsolete()
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid(), 41 + 1")
        pid, answer = cursor.fetchone()
    return pid, answer


def test_a_healthy_connection_is_reused_without_a_round_trip(persistent: Any) -> None:
    wrapper, checks = persistent
    first, _ = _request(wrapper)
    pids = {_request(wrapper)[0] for _ in range(5)}
    assert pids == {first}  # the same connection each time
    assert checks == []  # and no SELECT 1 before any of them


def test_a_connection_postgresql_closed_is_replaced_before_the_query(persistent: Any) -> None:
    wrapper, checks = persistent
    pid, _ = _request(wrapper)
    dsn = wrapper.get_connection_params()
    with psycopg.connect(dbname=dsn["dbname"], user=dsn.get("user"), host=dsn.get("host"),
                         port=dsn.get("port"), password=dsn.get("password"),
                         autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        other.execute("SELECT pg_sleep(0.2)")  # the FATAL message and the close reach us
    new_pid, answer = _request(wrapper)
    assert answer == 42  # the request's query succeeded
    assert new_pid != pid  # on a new connection
    assert checks  # the socket had something to read: Django's check ran (and failed)
