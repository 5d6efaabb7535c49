"""Turns: one agent reasoning round, from the triggering message to the final answer.

Invariants kept by the database:

* At most one *active* turn (``pending``, ``running`` or ``interrupted``) per session: a partial
  unique index, so two concurrent sends cannot both start a turn.
* ``status`` only moves along ``TURN_TRANSITIONS``; the terminal statuses (completed, failed,
  cancelled, merged) never change (see ``services.turn_transition``).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q


class TurnStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"  # suspended, waiting for a browser tool result
    MERGED = "merged"


ACTIVE_TURN_STATUSES = (TurnStatus.PENDING, TurnStatus.RUNNING, TurnStatus.INTERRUPTED)
TERMINAL_TURN_STATUSES = (
    TurnStatus.COMPLETED,
    TurnStatus.FAILED,
    TurnStatus.CANCELLED,
    TurnStatus.MERGED,
)

_ENDINGS = frozenset({TurnStatus.FAILED, TurnStatus.CANCELLED, TurnStatus.MERGED})
TURN_TRANSITIONS: dict[str, frozenset[str]] = {
    TurnStatus.PENDING: frozenset({TurnStatus.RUNNING}) | _ENDINGS,
    TurnStatus.RUNNING: frozenset({TurnStatus.COMPLETED, TurnStatus.INTERRUPTED}) | _ENDINGS,
    # interrupted -> running when the tool result arrives and the engine resumes.
    TurnStatus.INTERRUPTED: frozenset({TurnStatus.RUNNING}) | _ENDINGS,
    TurnStatus.COMPLETED: frozenset(),
    TurnStatus.FAILED: frozenset(),
    TurnStatus.CANCELLED: frozenset(),
    TurnStatus.MERGED: frozenset(),
}


class Turn(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(
        "agent_sessions.Session", on_delete=models.CASCADE, related_name="turns"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_turns"
    )
    client_id = models.CharField(max_length=128, blank=True, default="")
    status = models.CharField(max_length=16, choices=TurnStatus.choices, default=TurnStatus.PENDING)
    trigger_message = models.ForeignKey(
        "agent_sessions.Message",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="triggered_turns",
    )
    error_message = models.TextField(blank=True, default="")
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    total_tokens = models.BigIntegerField(default=0)
    cached_tokens = models.BigIntegerField(default=0)
    reasoning_tokens = models.BigIntegerField(default=0)
    # Set by v1.turn.stop; Redis's stop flag is the copy a streaming worker polls.
    stop_requested_at = models.DateTimeField(null=True, blank=True, editable=False)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)  # set on any terminal status
    deleted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session"],
                condition=Q(status__in=ACTIVE_TURN_STATUSES),
                name="turn_one_active_per_session",
            )
        ]
        indexes = [
            models.Index(fields=["session", "created_at", "id"], name="turn_session_created"),
            models.Index(fields=["status", "updated_at"], name="turn_status_updated"),
            # per-user windows: the hourly cap on sends, the usage page
            models.Index(fields=["user", "created_at"], name="turn_user_created"),
        ]

    def __str__(self) -> str:
        return f"turn {self.id} ({self.status})"


class TurnCheckpoint(models.Model):
    """What a turn needs to resume (``engine.Checkpoint`` as JSON), one row per unfinished turn.

    A table of its own, not a column of ``Turn``: a transcript may weigh megabytes (tool
    results), and turns are read everywhere (every transition re-reads its row); only the
    worker resuming the turn reads this. Written before Redis's copy, so it is never behind it;
    deleted when the turn ends.
    """

    turn = models.OneToOneField(
        Turn, primary_key=True, on_delete=models.CASCADE, related_name="checkpoint"
    )
    data = models.JSONField()
    saved_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"checkpoint of turn {self.turn_id}"


class LLMCall(models.Model):
    """One model answer as the provider billed it (``accounting.record_answer``).

    A row per call, never updated: a step repeated after a crash is another call the provider
    billed. Token numbers are the provider's (0 when it reported none: ``usage_reported`` is
    False, and only ``prompt_estimate``, our own count of the prompt, is known).
    """

    class Purpose(models.TextChoices):
        ANSWER = "answer", "answer of a turn"
        COMPACTION = "compaction", "compaction summary"
        EXTRACTION = "extraction", "memory extraction"
        PREFETCH = "prefetch", "live call request sent ahead, unused"

    # None for calls outside a turn: a manual compaction, a memory extraction.
    turn = models.ForeignKey(Turn, null=True, blank=True, on_delete=models.CASCADE,
                             related_name="llm_calls")
    session = models.ForeignKey(
        "agent_sessions.Session", on_delete=models.CASCADE, related_name="llm_calls"
    )
    purpose = models.CharField(max_length=16, choices=Purpose.choices, default=Purpose.ANSWER)
    message = models.ForeignKey(
        "agent_sessions.Message", null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )
    step = models.PositiveIntegerField()  # the answer's index in its turn
    model = models.CharField(max_length=128)
    usage_reported = models.BooleanField(default=True)
    prompt_tokens = models.BigIntegerField(default=0)  # cached and cache-written included
    completion_tokens = models.BigIntegerField(default=0)  # reasoning included
    total_tokens = models.BigIntegerField(default=0)
    cached_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    reasoning_tokens = models.BigIntegerField(default=0)
    prompt_estimate = models.BigIntegerField(default=0)
    # USD from the model's price row when the call was recorded; null: no row, or no usage.
    cost_usd = models.DecimalField(max_digits=16, decimal_places=8, null=True, blank=True)
    # Share of this request's prompt that repeats the previous request's (None for the first).
    shared_prefix_ratio = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "LLM call"
        indexes = [
            models.Index(fields=["session", "created_at"], name="llmcall_session_created"),
            models.Index(fields=["turn", "step"], name="llmcall_turn_step"),
            models.Index(fields=["created_at"], name="llmcall_created"),
        ]

    def __str__(self) -> str:
        return f"{self.model} call {self.step} of turn {self.turn_id}"
