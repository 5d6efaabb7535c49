"""Writes to turns that belong to the data model: the status state machine.

Creating, running and stopping turns is the agent engine's and ``message.send``'s business;
they move a turn only through ``turn_transition``, which guarantees that a turn leaves a status
at most once (one conditional UPDATE) and that terminal statuses never change.
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

from .models import TERMINAL_TURN_STATUSES, TURN_TRANSITIONS, Turn, TurnStatus


def turn_transition(
    *,
    turn_id: uuid.UUID | str,
    to: str,
    user_id: int | None = None,
    values: Mapping[str, Any] | None = None,
) -> Turn:
    """Move a turn along ``TURN_TRANSITIONS`` with one conditional UPDATE; return it fresh.

    Entering ``running`` stamps ``started_at`` the first time; a terminal status stamps
    ``completed_at``. ``values`` (e.g. ``error_message``, token usage) are written in the same
    UPDATE. Raises ``InvalidState`` and changes nothing when the move is refused; ``NotFound``
    when the turn (of ``user_id``, if given) is not there. Publishes nothing.
    """
    pk = as_uuid(turn_id, "turn")
    now = timezone.now()
    stamps: dict[str, Any] = dict(values or {})
    if to == TurnStatus.RUNNING:
        stamps["started_at"] = Coalesce(F("started_at"), now)
    elif to in TERMINAL_TURN_STATUSES:
        stamps["completed_at"] = now
    scope = {"user_id": user_id} if user_id is not None else None
    apply_transition(
        Turn, entity="turn", pk=pk, to=to, table=TURN_TRANSITIONS, scope=scope, values=stamps
    )
    return Turn.objects.get(pk=pk)
