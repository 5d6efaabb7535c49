"""An idle turn thread keeps its database connection open, so that a turn does not open one
(a new PostgreSQL backend and its set-up round trips) before its model request."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from apps.turns import worker

pytestmark = [pytest.mark.django_db]


def _in_a_new_thread(fn: Any) -> dict[str, Any]:
    """Run ``fn(connection)`` on a fresh thread, which has its own connection."""
    out: dict[str, Any] = {}

    def run() -> None:
        from django.db import connection

        try:
            out["result"] = fn(connection)
        except BaseException as exc:  # reported to the test
            out["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    return out


def _ready(connection: Any) -> tuple[bool, bool]:
    before = connection.connection is not None
    worker._connection_ready()
    return before, connection.connection is not None


def test_a_persistent_connection_is_opened_while_the_thread_waits(monkeypatch) -> None:
    from django.db import connection

    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 60)
    assert _in_a_new_thread(_ready) == {"result": (False, True)}


def test_without_persistent_connections_nothing_is_opened(monkeypatch) -> None:
    from django.db import connection

    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 0)
    assert _in_a_new_thread(_ready) == {"result": (False, False)}


def test_a_database_that_is_away_does_not_break_the_idle_loop(monkeypatch) -> None:
    import socket

    from django.db import connection

    with socket.socket() as taken:  # bound, never listening: connections to it are refused,
        taken.bind(("127.0.0.1", 0))  # and no other process can take the port meanwhile
        monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 60)
        if connection.vendor == "sqlite":  # the embedded default: a file that cannot be opened
            monkeypatch.setitem(connection.settings_dict, "NAME",
                                "/nonexistent-rtcagent-dir/away.sqlite3")
        else:
            monkeypatch.setitem(connection.settings_dict, "HOST", "127.0.0.1")
            monkeypatch.setitem(connection.settings_dict, "PORT", str(taken.getsockname()[1]))
        assert _in_a_new_thread(_ready) == {"result": (False, False)}


def test_a_new_connection_is_warmed_with_the_turn_paths_tables() -> None:
    """PostgreSQL: a new connection reads no row from each table of the turn path, so that
    its first turn does not load their catalog entries; elsewhere nothing is sent."""
    from django.db import connections

    from apps.turns.warmup import HOT_MODELS

    fresh = connections.create_connection("default")
    fresh.force_debug_cursor = True  # its statements are logged from the first one
    try:
        fresh.ensure_connection()
        sent = [q["sql"] for q in fresh.queries_log]
        with fresh.cursor() as cursor:  # and it works as usual afterwards
            cursor.execute("SELECT 1")
            assert cursor.fetchone() == (1,)
    finally:
        fresh.close()
    if fresh.vendor != "postgresql":
        assert not any("LIMIT 0" in s for s in sent)
        return
    from django.apps import apps

    warm = next(s for s in sent if "LIMIT 0" in s)
    for label in HOT_MODELS:
        assert f'"{apps.get_model(label)._meta.db_table}" LIMIT 0' in warm


def test_a_database_without_the_tables_is_left_as_it_is() -> None:
    from django.db import connections

    fresh = connections.create_connection("default")
    if fresh.vendor != "postgresql":
        pytest.skip("the warm-up is PostgreSQL's")
    fresh.settings_dict = {**fresh.settings_dict, "NAME": "postgres"}  # no project tables
    try:
        fresh.ensure_connection()  # the warm-up fails quietly
        with fresh.cursor() as cursor:
            cursor.execute("SELECT 1")
            assert cursor.fetchone() == (1,)
    finally:
        fresh.close()
