"""Reads for the operator console and /metrics: queue, turns, errors, processes and usage.

Plain data only (dicts and lists), each query bounded: turns are counted through the indexes on
``status`` (active turns: the partial unique index; failures: ``(status, updated_at)``) and usage
is read over a window of days.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import Count, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from apps.turns import queue
from apps.turns.llm import DEFAULT_MODEL
from apps.turns.llm_errors import CATEGORIES
from apps.turns.models import ACTIVE_TURN_STATUSES, Turn, TurnStatus

from . import processes
from .models import ModelPrice


def turn_counts() -> dict[str, int]:
    """Open turns by status: running, waiting to start (pending), waiting on a browser tool
    (interrupted)."""
    counts = dict.fromkeys((str(s) for s in ACTIVE_TURN_STATUSES), 0)
    rows = Turn.objects.filter(status__in=ACTIVE_TURN_STATUSES).values("status")
    for row in rows.annotate(n=Count("id")):
        counts[row["status"]] = row["n"]
    return counts


def error_category(error_message: str) -> str:
    """A failed turn's ``error_message`` is ``"<category>: <title>"`` (``runner.fail``)."""
    head = error_message.split(":", 1)[0].strip()
    return head if head in CATEGORIES else "other"


def errors_since(since: Any) -> dict[str, int]:
    """Turns failed since ``since``, by error category (every category present, 0 or more)."""
    counts: Counter[str] = Counter(dict.fromkeys(CATEGORIES, 0))
    rows = (Turn.objects.filter(status=TurnStatus.FAILED, updated_at__gte=since)
            .values("error_message").annotate(n=Count("id")))
    for row in rows:
        counts[error_category(row["error_message"])] += row["n"]
    return dict(counts)


def system_state() -> dict[str, Any]:
    """Everything the system page and /metrics show, except the service probes."""
    return {
        "workers": processes.live("worker"),
        "webs": processes.live("web"),
        "queue": queue.depth(),
        "turns": turn_counts(),
        "errors_last_hour": errors_since(timezone.now() - timedelta(hours=1)),
    }


# --- usage ------------------------------------------------------------------------------------

def current_model() -> str:
    return getattr(settings, "RTC_MODEL", "") or DEFAULT_MODEL


def current_price() -> ModelPrice | None:
    """The price row of the model configured now (usage is priced with it; turns do not record
    their model), or None: then cost is left empty."""
    return ModelPrice.objects.filter(model=current_model()).first()


def _cost(price: ModelPrice | None, row: dict[str, Any]) -> Decimal | None:
    if price is None:
        return None
    return price.cost(input_tokens=row["input"], cached_tokens=row["cached"],
                      output_tokens=row["output"])


_SUMS = {
    "turns": Count("id"),
    "input": Sum("input_tokens", default=0),
    "output": Sum("output_tokens", default=0),
    "cached": Sum("cached_tokens", default=0),
}


def usage_by_user(*, days: int, limit: int = 200) -> list[dict[str, Any]]:
    """Token use per user over the last ``days`` days, heaviest first (at most ``limit``)."""
    since = timezone.now() - timedelta(days=days)
    price = current_price()
    rows = (Turn.objects.filter(created_at__gte=since).values("user_id", "user__email")
            .annotate(**_SUMS).order_by("-output", "-input", "user_id")[:limit])
    return [{"user_id": r["user_id"], "email": r["user__email"], "turns": r["turns"],
             "input": r["input"], "output": r["output"], "cached": r["cached"],
             "cost": _cost(price, r)} for r in rows]


def usage_by_day(*, days: int, user_id: int | None = None) -> list[dict[str, Any]]:
    """Token use per day (UTC) over the last ``days`` days, every day present, oldest first."""
    today = timezone.now().date()
    first = today - timedelta(days=days - 1)
    start = datetime.combine(first, datetime.min.time(), tzinfo=UTC)
    turns = Turn.objects.filter(created_at__gte=start)
    if user_id is not None:
        turns = turns.filter(user_id=user_id)
    found = {r["day"]: r for r in turns.annotate(day=TruncDate("created_at"))
             .values("day").annotate(**_SUMS).order_by("day")}
    price = current_price()
    out = []
    for n in range(days):
        day: date = first + timedelta(days=n)
        row = found.get(day) or {"turns": 0, "input": 0, "output": 0, "cached": 0}
        out.append({"day": day, "turns": row["turns"], "input": row["input"],
                    "output": row["output"], "cached": row["cached"], "cost": _cost(price, row)})
    return out
