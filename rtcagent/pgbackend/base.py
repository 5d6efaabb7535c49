"""Django's PostgreSQL backend, with a persistent connection's health check done on its socket.

With ``CONN_HEALTH_CHECKS`` Django runs ``SELECT 1`` before a persistent connection's first use
in each request, and every RPC and every hop into the ORM is a request here
(``channels.db.database_sync_to_async`` closes old connections around each call): one more
round trip to PostgreSQL per hop, for a connection that is almost always fine.

A connection that PostgreSQL (or a proxy) has closed, on a restart, ``pg_terminate_backend`` or
a crash, has something to read: the server's ``FATAL`` message, or the end of the stream. A
healthy idle connection outside a transaction has nothing (this project never ``LISTEN``s). So
the check polls the socket without waiting: nothing to read, the connection is used as it is;
something to read, or a connection not idle, Django's own check (``SELECT 1``) decides. What
neither notices in time (a peer gone without a word, a network cut) fails the request like a
cut in the middle of it would, and Django drops that connection afterwards.

Django has no setting for this; psycopg's pool would skip the check but change how connections
are held across the turn threads, the ticks and the tests (``CONN_MAX_AGE``), so not now.
"""

from __future__ import annotations

import select

from django.db.backends.postgresql import base
from psycopg import pq


def _quiet(conn: object) -> bool:
    """True when the psycopg connection is open, idle, and has nothing waiting on its socket."""
    try:
        pgconn = conn.pgconn  # type: ignore[attr-defined]
        if (conn.closed or pgconn.status != pq.ConnStatus.OK  # type: ignore[attr-defined]
                or pgconn.transaction_status != pq.TransactionStatus.IDLE):
            return False
        poller = select.poll()
        poller.register(pgconn.socket, select.POLLIN | select.POLLPRI)
        return not poller.poll(0)
    except Exception:  # anything odd: let Django's own check decide
        return False


class DatabaseWrapper(base.DatabaseWrapper):
    def close_if_health_check_failed(self) -> None:
        if (self.connection is not None and self.health_check_enabled
                and not self.health_check_done and _quiet(self.connection)):
            self.health_check_done = True
            return
        super().close_if_health_check_failed()
