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

Batched transactions (``batched``, used through ``rtcagent.rows.batched``): a transaction on a
hot path is a few statements, most of them inserts whose reply nobody reads, and each one,
with psycopg's ``BEGIN`` and the ``COMMIT``, is a round trip to PostgreSQL. Inside a batched
transaction the ``BEGIN`` and every plain ``INSERT`` (no ``RETURNING``) wait, unsent, and go
with the next statement in one query string (the simple query protocol runs several
statements; Django's psycopg cursors bind parameters on the client), the last ones with the
``COMMIT``. The statement they go with gets its own result as usual (the cursor is moved past
theirs). psycopg's pipeline mode was tried first: it syncs on every change of autocommit and
on leaving the pipeline, which cost as many round trips as it saved.
"""

from __future__ import annotations

import contextlib
import select
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from django.db.backends.postgresql import base
from psycopg import pq

from rtcagent.rows import joined

_BEGIN = ("BEGIN", None)


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


def _deferrable(sql: str) -> bool:
    """A plain ``INSERT`` (an upsert too): nobody reads its reply."""
    head = sql.lstrip()[:7].upper()
    return head == "INSERT " and "RETURNING" not in sql.upper()


class DatabaseWrapper(base.DatabaseWrapper):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batching = False  # inside ``batched``
        self._sending = False  # ``_send`` runs what was held: nothing is held again
        self._held: list[tuple[str, Any]] = []  # statements waiting for the next one

    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        """Around a whole transaction (``with batched(), transaction.atomic():``): its
        ``BEGIN`` and plain inserts go with the next statement, the last ones with the commit.
        An insert's error (a unique constraint) is raised by the statement it goes with, at
        the latest by the commit, as Django's own class."""
        if self.batching:
            yield
            return
        self.batching = True
        try:
            with self.execute_wrapper(self._batch_execute):
                yield
            if self._held:  # inserts of a block inside a caller's transaction: send them now
                with self.cursor() as cursor:
                    self._send(cursor, self._take())
        finally:
            self.batching = False
            self._held.clear()

    def hold(self, sql: str, params: list[Any]) -> bool:
        """Keep a statement whose reply nobody reads (a lock) for the next one; False when not
        in a batched transaction (the caller runs it)."""
        if not (self.batching and self.in_atomic_block):
            return False
        self._held.append((sql, params))
        return True

    def _take(self) -> list[tuple[str, Any]]:
        held, self._held = self._held, []
        return held

    def _send(self, cursor: Any, statements: list[tuple[str, Any]]) -> None:
        """Run ``statements`` in one query string now, as a statement of Django's."""
        sql, params = joined(statements)
        self._sending = True  # not held again, even if it is a lone insert
        try:
            cursor.execute(sql, params)
        finally:
            self._sending = False

    def _batch_execute(self, execute: Callable[..., Any], sql: str, params: Any, many: bool,
                       context: dict[str, Any]) -> Any:
        if not self.in_atomic_block or self._sending:
            return execute(sql, params, many, context)
        if not many and _deferrable(sql) and not isinstance(params, Mapping):
            self._held.append((sql, list(params) if params is not None else None))
            return None
        held = self._take()
        if not held:
            return execute(sql, params, many, context)
        raw = context["cursor"].cursor
        if many or isinstance(params, Mapping) or getattr(raw, "name", None):
            # an executemany, named parameters or a server-side cursor (``iterator()``, whose
            # statement becomes a DECLARE): what is held goes first, on a cursor of its own
            with self.cursor() as cursor:
                self._send(cursor, held)
            return execute(sql, params, many, context)
        text, values = joined([*held, (sql, params)])
        result = execute(text, values, False, context)
        for _ in held:  # the cursor shows the statement's own result, as if it ran alone
            raw.nextset()
        return result

    def _set_autocommit(self, autocommit: bool) -> None:
        if self.batching and not autocommit and not self.in_atomic_block:
            # psycopg stays in autocommit: the BEGIN goes with the first statement
            self._held.insert(0, _BEGIN)
            return
        super()._set_autocommit(autocommit)

    def _commit(self) -> None:
        if self._held:
            held = self._take()
            if held[0] is _BEGIN and len(held) == 1:  # nothing was written: nothing to send
                return None
            with self.wrap_database_errors, self.connection.cursor() as cursor:
                cursor.execute(*joined([*held, ("COMMIT", None)]))
            return None
        return super()._commit()

    def _rollback(self) -> None:
        self._held.clear()
        return super()._rollback()

    def _close(self) -> None:
        self._held.clear()
        return super()._close()

    def close_if_health_check_failed(self) -> None:
        if (self.connection is not None and self.health_check_enabled
                and not self.health_check_done and _quiet(self.connection)):
            self.health_check_done = True
            return
        super().close_if_health_check_failed()
