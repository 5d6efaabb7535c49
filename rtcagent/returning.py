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

``update_where_returning`` writes the statement itself for the simple shape that every
state-machine move has (equalities, one ``IN`` list, ``IS NULL`` tests; plain values and
first-time stamps, ``IfNull``), its text built once per shape: on the turn path, where the
compiler cost several times the statement's run (a tool call's pause and its resume each move
a row or two). Anything else stays with ``update_returning``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import connections, models
from django.db.models.sql import UpdateQuery

from rtcagent.rows import Columns

M = TypeVar("M", bound=models.Model)


@dataclass(frozen=True)
class IfNull:
    """A value set only where the column has none (``COALESCE(column, value)``): a stamp made
    the first time, kept on later moves."""

    value: Any


def update_where_returning(
    model: type[M], *, where: Mapping[str, Any], where_in: tuple[str, Sequence[Any]],
    values: Mapping[str, Any], db: str = "default",
) -> list[M] | None:
    """``UPDATE <model> SET values WHERE where AND where_in RETURNING *`` as instances, or None
    when the shape is not this function's (the caller then uses ``update_returning``).

    ``where``: attname -> value (equality), or ``<attname>__isnull`` -> True; ``where_in``:
    (attname, values), non-empty; ``values``: attname -> value or ``IfNull``. Values are
    prepared by their fields as the ORM's update prepares them."""
    if not where_in[1] or any(hasattr(v, "resolve_expression") for v in values.values()):
        return None
    if any(k.endswith("__isnull") and v is not True for k, v in where.items()):
        return None
    conn = connections[db]
    meta = model._meta
    try:
        sql = _update_sql(model, db, tuple(where), where_in[0], len(where_in[1]),
                          tuple((k, isinstance(v, IfNull)) for k, v in values.items()))
    except LookupError:  # not a plain field's attname
        return None
    params: list[Any] = []
    for name, value in values.items():
        raw = value.value if isinstance(value, IfNull) else value
        params.append(_field(meta, name).get_db_prep_save(raw, conn))
    for name, value in where.items():
        if not name.endswith("__isnull"):
            params.append(_field(meta, name).get_db_prep_value(value, conn, prepared=False))
    field = _field(meta, where_in[0])
    params += [field.get_db_prep_value(v, conn, prepared=False) for v in where_in[1]]
    with conn.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    columns = _returned(model)
    if conn.vendor == "sqlite":
        floats = [i for i, f in enumerate(columns.fields) if f.get_internal_type() == "FloatField"]
        if floats:
            rows = [_floats(row, floats) for row in rows]
    return columns.build_all(rows, db)


@functools.cache  # on the turn path: found once per model and name
def _field(meta: Any, attname: str) -> Any:
    for field in meta.concrete_fields:
        if field.attname == attname:
            return field
    raise LookupError(attname)


@functools.cache
def _returned(model: type[models.Model]) -> Columns:
    return Columns(model, model._meta.db_table)


@functools.cache
def _update_sql(model: type[models.Model], db: str, where: tuple[str, ...], in_name: str,
                in_count: int, values: tuple[tuple[str, bool], ...]) -> str:
    meta, quote = model._meta, connections[db].ops.quote_name
    sets = []
    for name, if_null in values:
        column = quote(_field(meta, name).column)
        sets.append(f"{column} = COALESCE({column}, %s)" if if_null else f"{column} = %s")
    conditions = []
    for name in where:
        if name.endswith("__isnull"):
            conditions.append(f"{quote(_field(meta, name[:-8]).column)} IS NULL")
        else:
            conditions.append(f"{quote(_field(meta, name).column)} = %s")
    marks = ", ".join(["%s"] * in_count)
    conditions.append(f"{quote(_field(meta, in_name).column)} IN ({marks})")
    returned = ", ".join(quote(f.column) for f in meta.concrete_fields)
    # names from the model's metadata; every value is a parameter
    return (f"UPDATE {quote(meta.db_table)} SET {', '.join(sets)} "  # noqa: S608
            f"WHERE {' AND '.join(conditions)} RETURNING {returned}")


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
