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
