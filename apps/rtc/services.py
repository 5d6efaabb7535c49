"""Writes to RTCs that belong to the data model: the forward-only status state machine.

``update_status`` / ``submit_result`` and the timeout sweep decide *when* an RTC moves; they move
it only through ``rtc_transition``, which guarantees that an RTC never goes backwards and that a
finished RTC (completed, failed, timeout, rejected) never changes again, so its result is
applied at most once even when two submissions race.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from django.db.models import F
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.sessions.selectors import as_uuid
from apps.sessions.statemachine import apply_transition

from .models import RTC_TRANSITIONS, TERMINAL_RTC_STATUSES, Rtc, RtcStatus


def rtc_transition(
    *,
    rtc_id: uuid.UUID | str,
    to: str,
    user_id: int | None = None,
    values: Mapping[str, Any] | None = None,
) -> Rtc:
    """Move an RTC forward along ``RTC_TRANSITIONS`` with one conditional UPDATE; return it.

    Stamps ``sent_at`` (sent), ``started_at`` (executing) the first time, ``completed_at`` on a
    terminal status. ``values`` (``result``, ``error_message``, ``client_id``) are written in the
    same UPDATE, so a result lands only together with the winning transition. Raises
    ``InvalidState`` and changes nothing when the move is refused; ``NotFound`` when the RTC (of
    ``user_id``, if given) is not there. Publishes nothing.
    """
    pk = as_uuid(rtc_id, "rtc")
    now = timezone.now()
    stamps: dict[str, Any] = dict(values or {})
    if to == RtcStatus.SENT:
        stamps["sent_at"] = Coalesce(F("sent_at"), now)
    elif to == RtcStatus.EXECUTING:
        stamps["started_at"] = Coalesce(F("started_at"), now)
    elif to in TERMINAL_RTC_STATUSES:
        stamps["completed_at"] = now
    scope = {"user_id": user_id} if user_id is not None else None
    apply_transition(
        Rtc, entity="rtc", pk=pk, to=to, table=RTC_TRANSITIONS, scope=scope, values=stamps
    )
    return Rtc.objects.get(pk=pk)
