"""A PostgreSQL cluster of its own for fault tests: ``initdb`` and ``pg_ctl`` from the server
binaries (``/usr/lib/postgresql/<version>/bin``) into a temporary folder, on a free port.

The shared PostgreSQL of the test run must never be restarted (other people's tests use it), so
the tests that restart PostgreSQL run the processes they start against one of these. ``initdb``
refuses to run as root: as root, every server command runs as the ``postgres`` user, which owns
the folder (a ``mkdtemp`` under ``/tmp``, since pytest's own temporary folders are private to
root). Authentication is ``trust`` and the server listens on 127.0.0.1 and a socket in that
folder only. ``fsync`` is off (an immediate stop crashes the server, not the machine: what it
wrote is in the page cache); ``synchronous_commit`` stays on, since with it off a crash loses
commits the clients were told about.

``PgStack`` is what a test module runs on such a cluster (Daphnes, a worker), with plain-SQL
reads of its rows: the ORM of the test process is bound to the test run's database.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql as pgsql

from apps.accounts.models import User
from apps.gateway.models import TopicEvent
from apps.rtc.models import Rtc
from apps.sessions.models import Message, Session
from apps.turns.models import Turn
from tests.livesrv import LiveServer, free_port
from tests.turns.stack import Workers

SERVER_GLOB = "/usr/lib/postgresql/*/bin"


def server_bin() -> Path | None:
    """The newest installed server binaries with ``initdb`` and ``pg_ctl``, or None."""
    found = [Path(p) for p in glob.glob(SERVER_GLOB)
             if (Path(p) / "initdb").exists() and (Path(p) / "pg_ctl").exists()]
    return max(found, key=lambda p: int(p.parent.name), default=None)


class PgCluster:
    """One cluster: ``start``, ``restart(mode)`` and ``stop(mode)`` (``fast`` or ``immediate``),
    ``destroy``.

    The port never changes, so processes pointed at ``url(name)`` reconnect by themselves."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.base = Path(tempfile.mkdtemp(prefix="rtc-pg-"))
        self.data = self.base / "data"
        self.log = self.base / "postgres.log"
        self.port = free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            self.as_user = ["runuser", "-u", "postgres", "--"]
            pw = pwd.getpwnam("postgres")
            os.chown(self.base, pw.pw_uid, pw.pw_gid)

    def _run(self, *args: str, timeout: float = 60) -> str:
        done = subprocess.run([*self.as_user, *args], capture_output=True, text=True,
                              timeout=timeout, cwd=self.base)
        if done.returncode:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}):\n{done.stdout}"
                               f"{done.stderr}\n{self.tail()}")
        return done.stdout

    def _pg_ctl(self, *args: str) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w",
                  "-t", "30", *args)

    def start(self) -> PgCluster:
        """Create the cluster on first use, then start it and wait until it accepts connections."""
        if not self.data.exists():
            self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                      "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 "
                   f"-c unix_socket_directories={self.base} -c fsync=off "
                   "-c max_connections=200")
        self._pg_ctl("-o", options, "start")
        return self

    def restart(self, mode: str) -> None:
        """``pg_ctl restart -m <mode>``: every connection is cut; back on the same port."""
        self._pg_ctl("-m", mode, "restart")

    def stop(self, mode: str = "immediate") -> None:
        if (self.data / "postmaster.pid").exists():
            self._pg_ctl("-m", mode, "stop")

    def destroy(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def url(self, name: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def connect(self, name: str = "postgres") -> psycopg.Connection:
        return psycopg.connect(self.url(name), autocommit=True)

    def create_database(self, name: str) -> str:
        with self.connect() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


# --- the processes of a fault test on a cluster, and plain-SQL reads of its rows -----------------


TABLES = {"user": User, "session": Session, "message": Message, "turn": Turn, "rtc": Rtc,
          "topic": TopicEvent}


def tables(query: str) -> pgsql.Composed:
    """``query`` with ``{message}``, ``{turn}`` ... replaced by those models' tables."""
    names = {key: pgsql.Identifier(model._meta.db_table) for key, model in TABLES.items()}
    return pgsql.SQL(query).format(**names)


@dataclass
class PgStack:
    cluster: PgCluster
    db: str
    web: LiveServer
    web_persistent: LiveServer
    workers: Workers

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        """``query`` names tables as ``{message}``, ``{turn}`` ... (``TABLES``)."""
        with self.cluster.connect(self.db) as conn:
            return conn.execute(tables(query), params).fetchall()

    def make_user(self) -> User:
        email = f"pg-{uuid.uuid4().hex[:12]}@example.com"
        ((uid,),) = self.sql(
            "INSERT INTO {user} (password, is_superuser, first_name, last_name, is_staff,"
            " is_active, date_joined, email) VALUES ('!', false, '', '', false, true, now(), %s)"
            " RETURNING id", email)
        return User(pk=uid, email=email)

    def processes_alive(self) -> bool:
        procs = [self.web.proc, self.web_persistent.proc, *self.workers.procs]
        return all(p.poll() is None for p in procs) and len(self.workers.procs) == 1

    def answered(self, session_id: str) -> bool:
        """Every user message of the session has its turn, completed."""
        ((sent,),) = self.sql("SELECT count(*) FROM {message} WHERE session_id = %s AND "
                              "role = 'user'", session_id)
        ((done,),) = self.sql("SELECT count(*) FROM {turn} WHERE session_id = %s AND "
                              "status = 'completed'", session_id)
        return bool(sent == done)

    def ledger(self, session_id: str) -> dict[str, Any]:
        """What the cluster holds for the session (as ``test_process_faults.ledger``)."""
        messages = self.sql("SELECT content->>'type', client_id, streaming_status FROM "
                            "{message} WHERE session_id = %s", session_id)
        return {
            "turns": [s for (s,) in self.sql(
                "SELECT status FROM {turn} WHERE session_id = %s", session_id)],
            "rtcs": self.sql("SELECT tool_call_id, status, client_id, result FROM {rtc} "
                             "WHERE session_id = %s ORDER BY \"offset\"", session_id),
            "kinds": Counter(kind for kind, _, _ in messages),
            "keys_unique": len({key for _, key, _ in messages}) == len(messages),
            "streaming": [key for _, key, status in messages if status == "streaming"],
        }


@contextmanager
def held(stack: PgStack, query: str, *params: Any) -> Iterator[Any]:
    """Run ``query`` in an open transaction of the test (a row lock, a row inserted), so that a
    request touching the same row waits inside PostgreSQL; yields ``waiters()``. The restart
    ends the transaction."""
    conn = psycopg.connect(stack.cluster.url(stack.db))
    probe = stack.cluster.connect(stack.db)
    try:
        conn.execute(tables(query), params)
        pid = conn.info.backend_pid

        def waiters() -> int:
            return int(probe.execute("SELECT count(*) FROM pg_stat_activity WHERE "
                                     "%s = ANY(pg_blocking_pids(pid))", [pid]).fetchone()[0])

        yield waiters
    finally:
        for c in (conn, probe):
            try:
                c.close()
            except psycopg.Error:
                pass
