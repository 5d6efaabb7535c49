"""Remote tool calls (RTC): a tool call of the model, executed in the user's browser.

Invariants kept by the database:

* One RTC per tool call, that is per ``toolcall_input`` message (``message``): re-running a step
  after a crash finds the existing row instead of asking the browser twice. Not per
  ``(turn, tool_call_id)``: models reuse ids such as ``call_0`` in later answers of one turn.
* ``status`` only moves forward along ``RTC_TRANSITIONS``
  (pending -> sent -> executing -> completed | failed | timeout | rejected, skipping allowed);
  a finished RTC never changes, so a result is applied at most once.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class RtcStatus(models.TextChoices):
    PENDING = "pending"
    SENT = "sent"
    EXECUTING = "executing"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMEOUT = "timeout"
    REJECTED = "rejected"


TERMINAL_RTC_STATUSES = (
    RtcStatus.COMPLETED,
    RtcStatus.FAILED,
    RtcStatus.TIMEOUT,
    RtcStatus.REJECTED,
)
_ORDER = (RtcStatus.PENDING, RtcStatus.SENT, RtcStatus.EXECUTING)
_FINISHED = frozenset(TERMINAL_RTC_STATUSES)
# Forward only: each unfinished status may go to any later unfinished one or finish.
RTC_TRANSITIONS: dict[str, frozenset[str]] = {
    **{status: frozenset(_ORDER[i + 1 :]) | _FINISHED for i, status in enumerate(_ORDER)},
    **{status: frozenset() for status in TERMINAL_RTC_STATUSES},
}


class Rtc(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(
        "agent_sessions.Session", on_delete=models.CASCADE, related_name="rtcs"
    )
    turn = models.ForeignKey("turns.Turn", on_delete=models.CASCADE, related_name="rtcs")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_rtcs"
    )
    tool_call_id = models.CharField(max_length=128)
    tool_name = models.CharField(max_length=128)
    parameters = models.JSONField(default=dict, blank=True)
    offset = models.PositiveIntegerField(default=0)  # order within the turn
    message = models.ForeignKey(  # the toolcall_input message
        "agent_sessions.Message",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    output_message = models.ForeignKey(  # the toolcall_output message
        "agent_sessions.Message",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    status = models.CharField(max_length=16, choices=RtcStatus.choices, default=RtcStatus.PENDING)
    needs_approval = models.BooleanField(default=False)
    result = models.JSONField(null=True, blank=True)
    error_message = models.TextField(blank=True, default="")
    client_id = models.CharField(max_length=128, blank=True, default="")  # who finished it
    deadline = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)  # set on any terminal status
    deleted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "RTC"
        verbose_name_plural = "RTCs"
        constraints = [
            models.UniqueConstraint(fields=["message"], condition=models.Q(message__isnull=False),
                                    name="rtc_one_per_call_message"),
        ]
        indexes = [
            models.Index(fields=["session", "created_at", "id"], name="rtc_session_created"),
            # the timeout sweep: unfinished RTCs past their deadline
            models.Index(fields=["status", "deadline"], name="rtc_status_deadline"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.id} ({self.status})"
