"""Keyset pagination with opaque cursors, shared by the session, turn and RTC lists.

A cursor names the last row of the previous page as ``(timestamp, id)``, encoded as URL-safe
base64 of a small JSON array. The next page is every row strictly after it in the list order,
so rows inserted meanwhile never shift a page (no duplicates, no skips), unlike OFFSET paging.
Cursors carry no authority: every query is still filtered by the caller's ownership.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet

from rtcagent.conf import rtc_setting
from rtcagent.errors import InvalidRequest


@dataclass(frozen=True)
class Page:
    """One page of rows and the cursor of the next page ("" when this is the last)."""

    items: list[Any]
    next_cursor: str


def page_limit(limit: int | None, *, default: int) -> int:
    """The page size to use: ``default`` when absent, at most ``PAGE_MAX``, at least 1."""
    if limit is None:
        return default
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidRequest("limit: must be a positive integer")
    return min(limit, int(rtc_setting("PAGE_MAX")))


def encode_cursor(at: datetime, pk: uuid.UUID) -> str:
    raw = json.dumps([at.isoformat(), str(pk)], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """Parse a cursor made by ``encode_cursor``; anything else is ``InvalidRequest``."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        at_text, pk_text = json.loads(base64.urlsafe_b64decode(padded.encode()))
        at = datetime.fromisoformat(at_text)
        pk = uuid.UUID(pk_text)
    except (ValueError, TypeError, binascii.Error, json.JSONDecodeError):
        raise InvalidRequest("cursor: not a cursor of this list") from None
    if at.tzinfo is None:
        raise InvalidRequest("cursor: not a cursor of this list")
    return at, pk


def keyset_page(
    queryset: QuerySet[Any],
    *,
    field: str,
    cursor: str | None,
    limit: int,
    descending: bool,
) -> Page:
    """A page of ``queryset`` ordered by ``(field, id)`` after ``cursor``."""
    if cursor:
        at, pk = decode_cursor(cursor)
        op = "lt" if descending else "gt"
        queryset = queryset.filter(Q(**{f"{field}__{op}": at}) | Q(**{field: at, f"id__{op}": pk}))
    sign = "-" if descending else ""
    rows = list(queryset.order_by(f"{sign}{field}", f"{sign}id")[: limit + 1])
    if len(rows) <= limit:
        return Page(items=rows, next_cursor="")
    rows = rows[:limit]
    last = rows[-1]
    return Page(items=rows, next_cursor=encode_cursor(getattr(last, field), last.pk))
