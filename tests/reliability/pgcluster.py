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
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg

from tests.livesrv import free_port

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
