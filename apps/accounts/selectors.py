"""Reads about accounts shared by every entry point (HTTP, the gateway, refresh)."""

from __future__ import annotations

import functools
import uuid
from datetime import UTC, datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from .models import TokenFamily


def user_token_valid(*, user_id: int, issued_at: float, family_id: object = None) -> bool:
    """The user exists, is active, a token issued at ``issued_at`` (``iat``, epoch seconds)
    was not revoked (``tokens_valid_after``) and, when the token names a refresh-token family
    (its ``fid`` claim, as found in the token: ``None`` when absent), that family belongs to the
    user and is not revoked; a ``fid`` that is not a UUID string is refused. One indexed read.

    In plain SQL rather than the ORM: every WebSocket connect, reconnect and refresh asks it,
    and compiling the query cost about four times running it (docs/performance.md)."""
    fid = None
    if family_id is not None:
        try:
            fid = family_id if isinstance(family_id, uuid.UUID) else uuid.UUID(family_id)  # type: ignore[arg-type]
        except (TypeError, ValueError, AttributeError):
            return False
    params: list[Any] = [int(user_id), True]
    if fid is not None:
        params.append(TokenFamily._meta.pk.get_db_prep_value(fid, connection))
    with connection.cursor() as cursor:
        cursor.execute(_token_sql(fid is not None), params)
        row = cursor.fetchone()
    if row is None:
        return False
    valid_after = _aware(row[0])
    return valid_after is None or issued_at >= valid_after.timestamp()


@functools.cache
def _token_sql(with_family: bool) -> str:
    """``user_token_valid``'s query: names from the models' metadata, values bound."""
    users, families = get_user_model()._meta, TokenFamily._meta
    q = connection.ops.quote_name
    sql = (f"SELECT u.{q(users.get_field('tokens_valid_after').column)} "  # noqa: S608
           f"FROM {q(users.db_table)} u WHERE u.{q(users.pk.column)} = %s "
           f"AND u.{q(users.get_field('is_active').column)} = %s")
    if with_family:
        sql += (f" AND EXISTS (SELECT 1 FROM {q(families.db_table)} f "  # noqa: S608
                f"WHERE f.{q(families.pk.column)} = %s "
                f"AND f.{q(families.get_field('user').column)} = u.{q(users.pk.column)} "
                f"AND f.{q(families.get_field('revoked_at').column)} IS NULL)")
    return sql


def _aware(value: Any) -> datetime | None:
    """A datetime column as a backend returns it (SQLite: text, in UTC) as an aware datetime."""
    if value is None or (isinstance(value, datetime) and timezone.is_aware(value)):
        return value
    parsed = value if isinstance(value, datetime) else parse_datetime(str(value))
    if parsed is None:
        raise ValueError(f"not a datetime: {value!r}")
    return timezone.make_aware(parsed, UTC) if timezone.is_naive(parsed) else parsed
