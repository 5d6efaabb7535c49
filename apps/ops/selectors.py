"""Reads for the operator console and /metrics: queue, turns, errors, processes and usage.

Plain data only (dicts and lists), each query bounded: turns are counted through the indexes on
``status`` (active turns: the partial unique index; failures: ``(status, updated_at)``) and usage
is read over a window of days.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Q, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from apps.turns import queue
from apps.turns.llm import DEFAULT_MODEL
from apps.turns.llm_errors import CATEGORIES
from apps.turns.models import ACTIVE_TURN_STATUSES, LLMCall, Turn, TurnStatus
from rtcagent.rows import Columns

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
# Read from ``LLMCall``, one row per model answer as the provider billed it, priced when it was
# recorded with that call's model's price row (a later price change does not rewrite history).

def current_model() -> str:
    return getattr(settings, "RTC_MODEL", "") or DEFAULT_MODEL


_SUMS = {
    "turns": Count("turn", distinct=True),
    "calls": Count("id"),
    "input": Sum("prompt_tokens", default=0),
    "output": Sum("completion_tokens", default=0),
    "cached": Sum("cached_tokens", default=0),
    "cost": Sum("cost_usd"),
    "unpriced": Count("id", filter=Q(cost_usd__isnull=True)),
}
_ZERO = {"turns": 0, "calls": 0, "input": 0, "output": 0, "cached": 0, "cost": None,
         "unpriced": 0}


def _calls(since: datetime, user_id: int | None = None) -> Any:
    calls = LLMCall.objects.filter(created_at__gte=since)
    return calls if user_id is None else calls.filter(session__user_id=user_id)


def usage_by_user(*, days: int, limit: int = 200) -> list[dict[str, Any]]:
    """Tokens and cost per user over the last ``days`` days, heaviest first (at most
    ``limit``). ``cost`` is None when no call of the user had a price."""
    since = timezone.now() - timedelta(days=days)
    rows = (_calls(since).values("session__user_id", "session__user__email")
            .annotate(**_SUMS).order_by("-output", "-input", "session__user_id")[:limit])
    return [{"user_id": r["session__user_id"], "email": r["session__user__email"],
             **{k: r[k] for k in _ZERO}} for r in rows]


def usage_by_day(*, days: int, user_id: int | None = None) -> list[dict[str, Any]]:
    """Tokens and cost per day (UTC) over the last ``days`` days, every day present, oldest
    first."""
    today = timezone.now().date()
    first = today - timedelta(days=days - 1)
    start = datetime.combine(first, datetime.min.time(), tzinfo=UTC)
    found = {r["day"]: r for r in _calls(start, user_id).annotate(day=TruncDate("created_at"))
             .values("day").annotate(**_SUMS).order_by("day")}
    out = []
    for n in range(days):
        day: date = first + timedelta(days=n)
        row = found.get(day) or _ZERO
        out.append({"day": day, **{k: row[k] for k in _ZERO}})
    return out


def unpriced_models(*, days: int, user_id: int | None = None) -> list[str]:
    """Models whose calls in the window were recorded without a price (no price row then):
    their cost is missing from the sums."""
    since = timezone.now() - timedelta(days=days)
    calls = _calls(since, user_id).filter(cost_usd__isnull=True, usage_reported=True)
    return sorted(set(calls.values_list("model", flat=True)))


_PRICE = Columns(ModelPrice, "p")


def price_of(model: str) -> ModelPrice | None:
    """``model``'s row, None without one. Hand-written (``rtcagent.rows``): every turn reads
    it for its profile before the model is asked, and each answer's accounting after."""
    rows = _PRICE.select("WHERE p.model = %s", [model])
    return rows[0] if rows else None


def price_statement(model: str) -> tuple[str, list[Any]]:
    """``price_of``'s statement (``rtcagent.rows.together`` reads it with others)."""
    return _PRICE.statement("WHERE p.model = %s", [model])
