"""``UPDATE … RETURNING`` through the ORM: change rows and read them back in one statement.

Django's ``QuerySet.update`` returns a row count, so code that changes a row and then needs it
(a snapshot to publish, a counter just incremented) runs a second ``SELECT``: on the turn path
every such pair is a round trip and another statement for Django to compile, on a core the
whole stack shares (docs/performance.md). ``update_returning`` compiles the update with
Django's own compiler (filters, ``F()`` expressions and field preparation as ``update`` does),
adds ``RETURNING`` with every concrete column, and builds model instances with the fields'
database converters, as a ``SELECT`` would. PostgreSQL and SQLite (3.35+) both support it.

Limits: only updates the compiler writes as one statement (no related-model updates, no
multi-table models); rows come back in no particular order.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.db import connections, models
from django.db.models.sql import UpdateQuery

M = TypeVar("M", bound=models.Model)


def update_returning(queryset: models.QuerySet[M], **values: Any) -> list[M]:
    """Apply ``values`` (as ``queryset.update(**values)``) and return the changed rows."""
    model = queryset.model
    meta = model._meta
    if meta.parents:
        raise ValueError(f"{model.__name__}: multi-table models are not supported")
    query = queryset.query.chain(UpdateQuery)
    query.add_update_values(values)
    if query.related_updates:
        raise ValueError("updates of related models are not supported")
    db = queryset.db
    compiler = query.get_compiler(db)
    sql, params = compiler.as_sql()
    if not sql:
        return []
    conn = connections[db]
    fields = meta.concrete_fields
    columns = ", ".join(conn.ops.quote_name(f.column) for f in fields)
    cols = [f.get_col(meta.db_table) for f in fields]
    converters = compiler.get_converters(cols)
    with conn.cursor() as cursor:
        cursor.execute(f"{sql} RETURNING {columns}", params)
        rows = cursor.fetchall()
    if converters:
        rows = list(compiler.apply_converters(rows, converters))
    # SQLite's RETURNING gives a REAL column's integral value as an int (0, not 0.0).
    floats = [i for i, f in enumerate(fields) if f.get_internal_type() == "FloatField"]
    if floats and conn.vendor == "sqlite":
        rows = [_floats(row, floats) for row in rows]
    names = [f.attname for f in fields]
    return [model.from_db(db, names, row) for row in rows]


def _floats(row: Any, at: list[int]) -> list[Any]:
    values = list(row)
    for i in at:
        if values[i] is not None:
            values[i] = float(values[i])
    return values
