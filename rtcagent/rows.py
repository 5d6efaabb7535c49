"""Model instances from one hand-written ``SELECT`` over several tables, one ``INSERT`` of an
instance without compiling it, and a transaction's inserts sent with its next statement
(``batched``).

For the few reads on the hot paths whose ORM query costs more to compile than to run: the
caller of a browser tool's result reads its RTC with the session and the call message
(``select_related`` of three tables: about 1.1 ms of CPU to compile and build against 0.13 ms
to run, docs/performance.md). The statement's text is built once from the models' metadata;
each row is cut into ``Columns`` parts, and each part becomes an instance with its fields'
database converters applied, as the ORM's own ``SELECT`` would give it (``Model.from_db``;
fields not read are deferred and load on access, as with ``only()``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from django.db import DatabaseError, connections, models

_INSERTS: dict[tuple[type[models.Model], str], str] = {}


class Columns:
    """``fields`` (attnames; all concrete fields when None) of ``model`` under ``alias``."""

    def __init__(self, model: type[models.Model], alias: str,
                 fields: Sequence[str] | None = None) -> None:
        meta = model._meta
        self.model = model
        self.alias = alias
        self.fields = [f for f in meta.concrete_fields if fields is None or f.attname in fields]
        self.names = [f.attname for f in self.fields]
        # ``converters``, by connection object (its id, and the object to tell a reused id)
        self._converters: dict[int, tuple[Any, list[tuple[int, Any, tuple[Any, ...]]]]] = {}

    def __len__(self) -> int:
        return len(self.fields)

    def sql(self, db: str = "default") -> str:
        """The columns' list, ``alias.column, ...``."""
        quote = connections[db].ops.quote_name
        return ", ".join(f"{self.alias}.{quote(f.column)}" for f in self.fields)

    def statement(self, where: str, params: Sequence[Any], db: str = "default"
                  ) -> tuple[str, list[Any]]:
        """``SELECT <columns> FROM <table> <alias> <where>`` (``where``: the statement's rest,
        conditions and order, with ``%s`` for ``params``) and its parameters."""
        return (f"SELECT {self.sql(db)} FROM {self.model._meta.db_table} "  # noqa: S608
                f"{self.alias} {where}", list(params))

    def select(self, where: str, params: Sequence[Any], db: str = "default") -> list[Any]:
        """The instances of ``statement(where, params)`` (read with ``read``: a statement
        ``together`` sent already is not sent again)."""
        return self.build_all(read(*self.statement(where, params, db), db=db), db)

    def converters(self, db: str = "default") -> list[tuple[int, Any, tuple[Any, ...]]]:
        """Each field's database converters, as the ORM finds them for a query (found once
        per connection object, whose operations they are bound to: a thread keeps its own for
        its life; ``build``'s ``converters``)."""
        conn = connections[db]
        found = self._converters.get(id(conn))
        if found is not None and found[0] is conn:
            return found[1]
        out = self._find_converters(conn)
        if len(self._converters) >= 64:  # threads come and go: forget the old ones' at times
            self._converters.clear()
        self._converters[id(conn)] = (conn, out)
        return out

    def _find_converters(self, conn: Any) -> list[tuple[int, Any, tuple[Any, ...]]]:
        out = []
        for i, field in enumerate(self.fields):
            col = field.get_col(self.alias)
            found = (*conn.ops.get_db_converters(col), *col.get_db_converters(conn))
            if found:
                out.append((i, col, found))
        return out

    def build(self, values: Sequence[Any], db: str = "default",
              converters: list[tuple[int, Any, tuple[Any, ...]]] | None = None) -> Any:
        """The instance of ``values`` (this part of a row), or None when its key is NULL (the
        row of an outer join that found none). ``converters``: ``self.converters(db)``, when
        the caller builds several rows of one statement."""
        conn = connections[db]
        row = list(values)
        for i, col, found in converters if converters is not None else self.converters(db):
            value = row[i]
            for convert in found:
                value = convert(value, col, conn)
            row[i] = value
        pk = self.model._meta.pk
        if pk is not None and pk.attname in self.names:
            if row[self.names.index(pk.attname)] is None:
                return None
        return self.model.from_db(db, self.names, row)

    def build_all(self, rows: Sequence[Sequence[Any]], db: str = "default") -> list[Any]:
        """``build`` of each row of one statement."""
        found = self.converters(db)
        return [self.build(row, db, found) for row in rows]


def split(row: Sequence[Any], parts: Sequence[Columns], db: str = "default") -> list[Any]:
    """``row`` (the parts' columns one after the other) as one instance per part."""
    out, at = [], 0
    for part in parts:
        out.append(part.build(row[at:at + len(part)], db))
        at += len(part)
    return out


def insert(obj: models.Model, db: str = "default") -> None:
    """Insert ``obj`` as ``obj.save(force_insert=True)`` would (``auto_now`` stamps set on it,
    each field's value prepared for the database) with the statement's text built once per
    model: on the turn path, where the ORM's insert cost three times its run to compile. For
    models whose primary key is set before the insert (a UUID default) and that have no
    ``save`` of their own; sends no signals (the models it is used for have no receivers)."""
    model = type(obj)
    meta = model._meta
    if obj.pk is None:
        raise ValueError(f"{model.__name__}: insert needs the primary key set")
    conn = connections[db]
    fields = meta.local_concrete_fields
    sql = _INSERTS.get((model, conn.vendor))
    if sql is None:
        quote = conn.ops.quote_name
        columns = ", ".join(quote(f.column) for f in fields)
        marks = ", ".join(["%s"] * len(fields))
        sql = _INSERTS[(model, conn.vendor)] = (
            f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({marks})")  # noqa: S608
    values = [f.get_db_prep_save(f.pre_save(obj, True), conn) for f in fields]
    with conn.cursor() as cursor:
        cursor.execute(sql, values)
    obj._state.adding = False
    obj._state.db = db


@contextlib.contextmanager
def batched(db: str = "default") -> Iterator[None]:
    """Around a whole transaction (``with batched(), transaction.atomic():``): on PostgreSQL
    its ``BEGIN`` and its plain ``INSERT``s go with the next statement in one round trip, the
    last ones with the ``COMMIT`` (``rtcagent.pgbackend``: a send's transaction goes from eight
    round trips to two). Every other statement runs where it is, with its own result, so the
    ORM's fetches and row counts are unchanged. The price: an insert's error (a unique
    constraint) is raised by the statement it goes with, at the latest by the commit, as
    Django's own class, so no ``try`` around a single insert inside the block. Elsewhere
    (SQLite) the block changes nothing."""
    conn = connections[db]
    start = getattr(conn, "batched", None)
    if start is None:
        yield
        return
    with start():
        yield


def joined(statements: Sequence[tuple[str, Sequence[Any] | None]]) -> tuple[str, list[Any]]:
    """One query string of ``statements`` (PostgreSQL's simple query protocol runs several),
    with their parameters in order; a statement without parameters (None) has its ``%``
    doubled, since the string as a whole has some."""
    texts: list[str] = []
    params: list[Any] = []
    for sql, values in statements:
        if values is None:
            texts.append(sql.replace("%", "%%"))
        else:
            texts.append(sql)
            params.extend(values)
    return "; ".join(texts), params


def later(sql: str, params: Sequence[Any], db: str = "default") -> None:
    """Run a statement whose reply nobody reads (a lock): inside ``batched`` it goes with the
    next statement, in the same round trip; elsewhere it runs now."""
    conn = connections[db]
    hold = getattr(conn, "hold", None)
    if hold is not None and hold(sql, list(params)):
        return
    with conn.cursor() as cursor:
        cursor.execute(sql, list(params))


_fetched = threading.local()  # ``together``: rows read ahead, by (db, statement, parameters)


def _key(db: str, sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
    try:
        key = (db, sql, tuple(params))
        hash(key)
    except TypeError:  # a parameter that cannot be a key (a list, a dict): read on its own
        return None
    return key


def _keyed(statements: Sequence[tuple[str, Sequence[Any]] | None], db: str
           ) -> list[tuple[tuple[Any, ...], str, list[Any]]]:
    wanted = [(sql, list(params)) for sql, params in (s for s in statements if s is not None)]
    return [(k, sql, params) for sql, params in wanted
            if (k := _key(db, sql, params)) is not None]


def _fetch(keyed: list[tuple[tuple[Any, ...], str, list[Any]]], db: str
           ) -> dict[tuple[Any, ...], list[Any]]:
    """The rows of ``keyed`` statements, read in one round trip on PostgreSQL; none of them
    when the database refuses one outside a transaction (each reader then asks on its own,
    and fails or copes as it would have); inside one the error stands."""
    out: dict[tuple[Any, ...], list[Any]] = {}
    conn = connections[db]
    try:
        with conn.cursor() as cursor:
            if conn.vendor == "postgresql" and len(keyed) > 1:
                cursor.execute(*joined([(sql, params) for _, sql, params in keyed]))
                for i, (key, _, _) in enumerate(keyed):
                    if i:
                        cursor.nextset()
                    out[key] = cursor.fetchall()
            else:
                for key, sql, params in keyed:
                    cursor.execute(sql, params)
                    out[key] = cursor.fetchall()
    except DatabaseError:
        if conn.in_atomic_block:  # the transaction is broken: its caller must know
            raise
        return {}
    return out


def read_ahead(statements: Sequence[tuple[str, Sequence[Any]] | None], db: str = "default"
               ) -> dict[tuple[Any, ...], list[Any]]:
    """Read ``statements`` now, as ``together`` would, and keep their rows for a later
    ``together(..., ahead=...)`` that names them again: for reads made while waiting for
    what comes next (their rows are as of now, which the caller must be able to accept)."""
    return _fetch(_keyed(statements, db), db)


@contextlib.contextmanager
def together(statements: Sequence[tuple[str, Sequence[Any]] | None],
             db: str = "default",
             ahead: dict[tuple[Any, ...], list[Any]] | None = None) -> Iterator[None]:
    """Read ``statements`` (independent ``SELECT``s; None entries are skipped) now, in one
    round trip on PostgreSQL (one query string, each statement's rows its own result set),
    one after the other elsewhere; inside the block, ``read`` of the same statement with the
    same parameters takes its rows instead of asking the database again. For a request's
    reads that several modules make one after the other (the conversation's summary, the
    reminders, the memories), whose statements the caller can name beforehand. Rows not taken
    by the end of the block are dropped. ``ahead``: rows ``read_ahead`` kept, used for the
    statements it holds (taken from it) instead of reading them again."""
    keyed = _keyed(statements, db)
    store: dict[tuple[Any, ...], list[Any]] = getattr(_fetched, "rows", None) or {}
    have = {k: ahead.pop(k) for k, _, _ in keyed if ahead and k in ahead}
    store.update(have)
    store.update(_fetch([s for s in keyed if s[0] not in have], db))
    outer = getattr(_fetched, "rows", None)
    _fetched.rows = store
    try:
        yield
    finally:
        for key, _, _ in keyed:
            store.pop(key, None)
        _fetched.rows = outer


def read(sql: str, params: Sequence[Any], db: str = "default") -> list[Any]:
    """The rows of a ``SELECT``: those ``together`` read already, else from the database."""
    store = getattr(_fetched, "rows", None)
    if store:
        key = _key(db, sql, params)
        if key is not None and key in store:
            return store.pop(key)
    with connections[db].cursor() as cursor:
        cursor.execute(sql, list(params))
        return cursor.fetchall()
