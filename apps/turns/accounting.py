"""Token accounting: what each LLM call cost, the totals, and how full the context is.

``record_answer`` is called once per model answer (``runner.finish_answer``). In one
transaction it stores the call (``LLMCall``), adds its usage to the turn's and the session's
totals, sets the answer message's token fields, adds the cost from the model's price row to
``Session.total_cost_usd`` and recomputes the session's context fields:

* ``current_context_tokens``: the prompt tokens of the last call as the provider reported them
  (our own count, ``prompt_estimate``, when it reported none); after a compaction the count of
  the new prompt (``set_context_tokens``).
* ``estimated_next_round_tokens``: an EWMA (weight ``EWMA_ALPHA`` for the newest sample) of how
  much the prompt grew from one call to the next. After the session's first call it is that
  answer's completion tokens (the least the next prompt grows by), replaced by the first measured
  growth. A call whose prompt did not grow (a compaction, a repeated request) leaves it alone.
* ``compression_threshold``: the model's context window less its auto-compact buffer
  (``profiles.profile_for``).
* ``compression_progress``: ``100 * current / threshold``, capped at 100, two decimals.
* ``rounds_until_compression``: ``floor((threshold - current) / estimate)`` LLM calls, or -1
  once ``current >= threshold``.

Publication is throttled per session (``PUBLISH_INTERVAL``): the first change publishes the
session at once; changes within the interval after it are coalesced, and one publication with
the latest values follows when the interval has passed (a daemon thread of the process; the
session is read after the change committed, so the last values always arrive). The throttle is
per process, which is enough: one worker runs a session at a time. Turn totals reach clients
with the turn's own Updates (``runner.publish_turn``); a message whose token fields changed is
published with the change, unthrottled.

Locks are taken in the order the rest of the engine uses (turn, then session), so a concurrent
``v1.turn.stop`` cannot deadlock with an answer being recorded.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from django.db import connections, transaction
from django.db.models import F
from django.utils import timezone

from apps.gateway.events import item, publish_update
from apps.ops.models import ModelPrice
from apps.sessions.models import Message, Session
from apps.sessions.serializers import message_to_dict, session_to_dict
from apps.turns.llm import Usage
from apps.turns.models import LLMCall, Turn
from apps.turns.profiles import current_model, profile_for, profile_from

log = logging.getLogger(__name__)

EWMA_ALPHA = 0.3
PUBLISH_INTERVAL = 1.0  # seconds between two session publications of token figures

_CONTEXT_FIELDS = ("current_context_tokens", "estimated_next_round_tokens",
                   "compression_threshold", "compression_progress", "rounds_until_compression")


# --- the arithmetic ---------------------------------------------------------------------------

def next_estimate(*, previous: int, current: int, estimate: int, completion_tokens: int,
                  seeded: bool = False) -> int:
    """The EWMA of per-call prompt growth after a call whose prompt had ``current`` tokens,
    the previous one ``previous`` (0: this is the session's first, whose completion tokens
    are the seed). ``seeded``: ``estimate`` is still that seed, which the first measured growth
    replaces. Rounded half up."""
    if previous <= 0:
        return estimate or max(0, completion_tokens)
    growth = current - previous
    if growth <= 0:
        return estimate
    if estimate <= 0 or seeded:
        return growth
    return math.floor(EWMA_ALPHA * growth + (1 - EWMA_ALPHA) * estimate + 0.5)


def context_fields(*, current: int, estimate: int, threshold: int) -> dict[str, Any]:
    """The session's context fields for ``current`` prompt tokens."""
    if threshold <= 0 or current >= threshold:
        progress, rounds = 100.0, -1
    else:
        progress = min(100.0, round(100 * current / threshold, 2))
        rounds = (threshold - current) // max(1, estimate)
    return {
        "current_context_tokens": current,
        "estimated_next_round_tokens": estimate,
        "compression_threshold": threshold,
        "compression_progress": progress,
        "rounds_until_compression": rounds,
    }


def call_cost(price: ModelPrice | None, usage: Usage | None) -> Decimal | None:
    """USD of one call from its model's row; None without a row or without usage."""
    if price is None or usage is None:
        return None
    return price.cost(
        input_tokens=usage.prompt_tokens, cached_tokens=usage.cached_tokens,
        output_tokens=usage.completion_tokens, cache_write_tokens=usage.cache_write_tokens,
    )


# --- publication, throttled -------------------------------------------------------------------

class SessionPublisher:
    """At most one session Update per ``interval`` per session, the last values always sent.

    ``claim`` (inside the writing transaction) says whether to publish now; otherwise
    ``defer`` (after commit) queues the session, and ``flush_due`` publishes what is due, each
    in its own transaction. ``autostart`` runs ``flush_due`` from a daemon thread.
    """

    def __init__(self, interval: float = PUBLISH_INTERVAL,
                 clock: Callable[[], float] = time.monotonic, *, autostart: bool = True) -> None:
        self.interval = interval
        self.clock = clock
        self.autostart = autostart
        self._cond = threading.Condition()
        self._last: dict[str, float] = {}  # session -> when it was last published
        self._due: dict[str, float] = {}  # session -> when its deferred publication is due
        self._thread: threading.Thread | None = None
        self._stopping = False

    def claim(self, session_id: str) -> bool:
        """True: publish now (and the interval starts now); False: ``defer`` after commit."""
        now = self.clock()
        with self._cond:
            if session_id in self._due:
                return False
            last = self._last.get(session_id)
            if last is not None and now - last < self.interval:
                return False
            self._last[session_id] = now
            if len(self._last) > 4096:  # forget sessions whose interval is long over
                self._last = {k: v for k, v in self._last.items() if now - v < self.interval}
            return True

    def defer(self, session_id: str) -> None:
        """Queue a publication of the session's state as committed by the time it is due."""
        with self._cond:
            if session_id not in self._due:
                last = self._last.get(session_id, float("-inf"))
                self._due[session_id] = max(self.clock(), last + self.interval)
            self._cond.notify()
            if self.autostart and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(
                    target=self._run, name="rtc-token-publisher", daemon=True
                )
                self._thread.start()

    def pending(self) -> list[str]:
        with self._cond:
            return sorted(self._due)

    def flush_due(self) -> int:
        """Publish every session whose deferred publication is due; how many were published."""
        now = self.clock()
        with self._cond:
            due = [sid for sid, at in self._due.items() if at <= now]
            for sid in due:
                del self._due[sid]
                self._last[sid] = now
        published = 0
        for sid in due:
            try:
                with transaction.atomic():
                    published += publish_session(sid)
            except Exception:
                log.exception("could not publish the token figures of session %s", sid)
        return published

    def stop(self, timeout: float = 5.0) -> None:
        """Publish what is pending now and end the thread (tests, an orderly shutdown)."""
        with self._cond:
            self._stopping = True
            for sid in self._due:
                self._due[sid] = float("-inf")
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
        else:
            self.flush_due()
        with self._cond:
            self._stopping, self._thread = False, None

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due and not self._stopping:
                    self._cond.wait()
                if not self._due:
                    return
                wait = min(self._due.values()) - self.clock()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
            try:
                self.flush_due()
            finally:
                connections.close_all()  # this thread's connections only


PUBLISHER = SessionPublisher()


def publish_session(session_id: object) -> bool:
    """Inside a transaction: publish the session as it is now (locked, so that concurrent
    publishers of the session deliver their snapshots in the order of their offsets); False
    when it is gone or soft-deleted."""
    session = Session.objects.select_for_update().filter(pk=session_id).first()
    return session is not None and _publish_row(session)


def _publish_row(session: Session) -> bool:
    """Inside a transaction, ``session`` locked by it: its snapshot published, unless it is
    soft-deleted (False)."""
    if session.deleted_at is not None:
        return False
    publish_update(user_id=session.user_id, items=[item("session", "updated", session.id)],
                   data_list=[session_to_dict(session)])
    return True


def _publish_throttled(session: Session) -> None:
    """Inside a transaction, ``session`` locked by it and as it saved it: published now (from
    that row, not read again) or, within the throttle's window, once the window ends."""
    sid = str(session.id)
    if PUBLISHER.claim(sid):
        _publish_row(session)
    else:
        transaction.on_commit(lambda: PUBLISHER.defer(sid))


# --- the services -----------------------------------------------------------------------------

def _message(message_id: object | None, session_id: object) -> Message | None:
    if message_id is None:
        return None
    if isinstance(message_id, Message):  # the caller's own row: read no copy of it
        return message_id if str(message_id.session_id) == str(session_id) else None
    try:
        pk = uuid.UUID(str(message_id))
    except ValueError:
        return None
    return Message.objects.filter(pk=pk, session_id=session_id).first()


def _ratio(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return min(1.0, max(0.0, float(value)))


def record_answer(
    *,
    turn_id: object | None,
    session_id: object,
    message_id: object | None,
    step: int,
    model: str,
    usage: Usage | None,
    prompt_estimate: int,
    shared_prefix_ratio: float | None,
    updates_context: bool = True,
    purpose: str | None = None,
) -> None:
    """Account for one model answer (see the module docstring); one transaction.

    ``message_id`` is the answer's message, its id or the row itself (its token fields are set;
    ignored when it is not a message of the session). ``updates_context=False`` is for calls
    whose prompt is not the conversation's (a compaction's summary call): billed and totalled,
    the context fields untouched. ``purpose`` defaults to an answer, or a compaction when the
    context is not updated. ``turn_id`` None: a call outside any turn (``record_call``).
    Raises ``LookupError`` (nothing written) when the turn is not the session's.
    """
    from apps.ops.selectors import price_of

    name = model or current_model()
    price = price_of(name)
    profile = profile_from(name, price)
    cost = call_cost(price, usage)
    if purpose is None:
        purpose = LLMCall.Purpose.ANSWER if updates_context else LLMCall.Purpose.COMPACTION
    with transaction.atomic():
        turn = Turn.objects.filter(pk=turn_id, session_id=session_id)
        if turn_id is None:
            found = Session.objects.filter(pk=session_id).exists()
        elif usage is not None:
            found = turn.update(
                input_tokens=F("input_tokens") + usage.prompt_tokens,
                output_tokens=F("output_tokens") + usage.completion_tokens,
                total_tokens=F("total_tokens") + usage.total_tokens,
                cached_tokens=F("cached_tokens") + usage.cached_tokens,
                reasoning_tokens=F("reasoning_tokens") + usage.reasoning_tokens,
            )
        else:
            found = turn.exists()
        if not found:
            raise LookupError(f"turn {turn_id} is not a turn of session {session_id}")
        msg = _message(message_id, session_id)
        if msg is not None and usage is not None:
            _set_message_tokens(msg, usage)
        session = Session.objects.select_for_update().get(pk=session_id)
        # exactly one call before this one (at most two rows read, however long the session)
        seeded = updates_context and len(
            LLMCall.objects.filter(session_id=session_id).values_list("pk", flat=True)[:2]) == 1
        LLMCall.objects.create(
            turn_id=turn_id, session_id=session_id, message=msg, step=step, model=profile.name,
            purpose=purpose,
            usage_reported=usage is not None,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            total_tokens=usage.total_tokens if usage else 0,
            cached_tokens=usage.cached_tokens if usage else 0,
            cache_write_tokens=usage.cache_write_tokens if usage else 0,
            reasoning_tokens=usage.reasoning_tokens if usage else 0,
            prompt_estimate=max(0, prompt_estimate), cost_usd=cost,
            shared_prefix_ratio=_ratio(shared_prefix_ratio),
        )
        changed = ["last_token_update_at", "updated_at"]
        if usage is not None:
            session.total_input_tokens += usage.prompt_tokens
            session.total_output_tokens += usage.completion_tokens
            session.total_tokens += usage.total_tokens
            session.total_cached_read_tokens += usage.cached_tokens
            session.total_cached_write_tokens += usage.cache_write_tokens
            session.total_reasoning_tokens += usage.reasoning_tokens
            changed += ["total_input_tokens", "total_output_tokens", "total_tokens",
                        "total_cached_read_tokens", "total_cached_write_tokens",
                        "total_reasoning_tokens"]
        if cost is not None:
            session.total_cost_usd += float(cost)
            changed.append("total_cost_usd")
        if updates_context:
            current = usage.prompt_tokens if usage and usage.prompt_tokens else prompt_estimate
            current = max(0, current)
            estimate = next_estimate(
                previous=session.current_context_tokens, current=current,
                estimate=session.estimated_next_round_tokens,
                completion_tokens=usage.completion_tokens if usage else 0, seeded=seeded,
            )
            for name, value in context_fields(
                current=current, estimate=estimate, threshold=profile.compression_threshold
            ).items():
                setattr(session, name, value)
            changed += _CONTEXT_FIELDS
        session.last_token_update_at = timezone.now()
        session.save(update_fields=changed)
        _publish_throttled(session)


def record_call(*, session_id: object, model: str, usage: Usage | None, purpose: str) -> None:
    """Account for a model call outside any turn (a manual compaction's summary, a memory
    extraction): an ``LLMCall`` row and the session's totals and cost; the context fields and
    no turn are touched. A session deleted meanwhile is skipped (logged)."""
    try:
        record_answer(turn_id=None, session_id=session_id, message_id=None, step=0, model=model,
                      usage=usage, prompt_estimate=0, shared_prefix_ratio=None,
                      updates_context=False, purpose=purpose)
    except LookupError:
        log.info("call of session %s not recorded: the session is gone", session_id)


def _set_message_tokens(msg: Message, usage: Usage) -> None:
    values = {
        "input_tokens": usage.prompt_tokens,
        "output_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "cached_tokens": usage.cached_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
    }
    if all(getattr(msg, name) == value for name, value in values.items()):
        return  # the runner already wrote (and published) these
    for name, value in values.items():
        setattr(msg, name, value)
    msg.save(update_fields=[*values, "updated_at"])
    publish_update(
        user_id=msg.user_id,
        items=[item("message", "updated", msg.id)],
        data_list=[message_to_dict(msg)],
    )


def set_context_tokens(*, session_id: object, tokens: int) -> None:
    """After a compaction: the new prompt has ``tokens`` tokens. The context fields are
    recomputed (the growth estimate is kept) and published, throttled."""
    if tokens < 0:
        raise ValueError("tokens cannot be negative")
    last = (LLMCall.objects.filter(session_id=session_id).order_by("-created_at", "-id")
            .values_list("model", flat=True).first())
    profile = profile_for(last or current_model())
    with transaction.atomic():
        session = Session.objects.select_for_update().get(pk=session_id)
        for name, value in context_fields(
            current=tokens, estimate=session.estimated_next_round_tokens,
            threshold=profile.compression_threshold,
        ).items():
            setattr(session, name, value)
        session.last_token_update_at = timezone.now()
        session.save(update_fields=[*_CONTEXT_FIELDS, "last_token_update_at", "updated_at"])
        _publish_throttled(session)
