"""Explicit state machines: one allowed-transitions table per model, one conditional UPDATE.

A transition never reads-then-writes. It is a single
``UPDATE ... SET status=<to> WHERE id=<pk> AND status IN (<allowed predecessors>) [AND scope]
RETURNING ...`` (the moved row comes back with it); the database decides who wins a race, and
exactly one of two concurrent callers can move a row out of a given state. Only after the
UPDATE changed no row do we read, to tell a missing (or foreign) row (``NotFound``) from a
refused move (``InvalidState``); that read decides nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, TypeVar

from django.db import models
from django.db.models import F
from django.db.models.functions import Coalesce
from django.utils import timezone

from rtcagent.errors import InvalidState, NotFound
from rtcagent.returning import IfNull, update_returning, update_where_returning

M = TypeVar("M", bound=models.Model)

Table = Mapping[str, frozenset[str]]


def predecessors(table: Table, to: str) -> list[str]:
    """The statuses from which ``to`` may be entered, in table order."""
    return [status for status, targets in table.items() if to in targets]


def apply_transition(
    model: type[M],
    *,
    entity: str,
    pk: Any,
    to: str,
    table: Table,
    scope: Mapping[str, Any] | None = None,
    values: Mapping[str, Any] | None = None,
    only_from: Collection[str] | None = None,
) -> M:
    """Move row ``pk`` of ``model`` to status ``to`` if the table allows it from its status now;
    return the row as the UPDATE left it (read back in the same statement).

    ``scope`` adds filters (owner, not soft-deleted) that make a row outside it ``NotFound``;
    ``values`` are set in the same UPDATE (timestamps, result, error; ``IfNull`` for a stamp made
    the first time only). ``updated_at`` is stamped.
    ``only_from`` narrows the allowed predecessors (e.g. "reopen" is closed -> idle only).
    Raises ``InvalidState`` (details: ``{"status": current, "to": to}``) and changes nothing when
    the move is not allowed, including any move out of a terminal status.
    """
    manager = model._default_manager
    scope = dict(scope or {})
    allowed = predecessors(table, to)
    if only_from is not None:
        allowed = [status for status in allowed if status in only_from]
    if allowed:
        moved = {"status": to, "updated_at": timezone.now(), **dict(values or {})}
        changed = update_where_returning(  # the statement written once per shape
            model, where={model._meta.pk.attname: pk, **scope}, where_in=("status", allowed),
            values=moved, db=manager.db,
        )
        if changed is None:  # an expression among the values: Django compiles it
            changed = update_returning(
                manager.filter(pk=pk, status__in=allowed, **scope),
                **{k: Coalesce(F(k), v.value) if isinstance(v, IfNull) else v
                   for k, v in moved.items()},
            )
        if changed:
            return changed[0]
    current = manager.filter(pk=pk, **scope).values_list("status", flat=True).first()
    if current is None:
        raise NotFound(entity, pk)
    raise InvalidState(
        f"{entity} {pk} cannot go from {current} to {to}",
        details={"status": current, "to": to},
    )
