"""Goals and loops: work the agent keeps doing across turns.

Invariants kept by the database, not by callers:

* At most one ``active`` goal per session (a partial unique index).
* ``Goal.status`` and ``Loop.status`` only move along their transition tables; every end is
  terminal (a goal is set again as a new row, a loop is created again as a new row).
* A loop tick runs at most once: ``LoopRun`` is unique on ``(loop, tick)``, and the tick is
  taken by one conditional ``UPDATE`` on ``Loop.next_tick`` in the same transaction. Redis only
  spares the workers that lose the race a trip to the database (``apps.tasks.scheduler``).
* A goal counts each completed turn once: ``Goal.last_turn`` moves with the round count in one
  conditional ``UPDATE``.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q


class GoalStatus(models.TextChoices):
    ACTIVE = "active"
    COMPLETED = "completed"  # the agent called completeGoal
    CANCELLED = "cancelled"  # the user (v1.goal.cancel, a new goal) or the agent (cancelGoal)
    EXHAUSTED = "exhausted"  # max_rounds turns ran and the goal was not met


GOAL_TRANSITIONS: dict[str, frozenset[str]] = {
    GoalStatus.ACTIVE: frozenset(
        {GoalStatus.COMPLETED, GoalStatus.CANCELLED, GoalStatus.EXHAUSTED}
    ),
    GoalStatus.COMPLETED: frozenset(),
    GoalStatus.CANCELLED: frozenset(),
    GoalStatus.EXHAUSTED: frozenset(),
}


class Goal(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(
        "agent_sessions.Session", on_delete=models.CASCADE, related_name="goals"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_goals"
    )
    condition = models.TextField()
    status = models.CharField(max_length=16, choices=GoalStatus.choices,
                              default=GoalStatus.ACTIVE)
    rounds = models.PositiveIntegerField(default=0)  # completed turns under this goal
    max_rounds = models.PositiveIntegerField()
    # The latest turn counted as a round: a hook called twice for one turn counts it once.
    last_turn = models.ForeignKey(
        "turns.Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # What the agent said when it completed or cancelled the goal (or why the server ended it).
    outcome = models.TextField(blank=True, default="")
    ended_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session"], condition=Q(status="active"),
                name="goal_one_active_per_session",
            ),
        ]
        indexes = [
            models.Index(fields=["session", "-created_at"], name="goal_session_recent"),
            models.Index(fields=["status", "updated_at"], name="goal_status_updated"),
        ]

    def __str__(self) -> str:
        return f"goal {self.id} ({self.status})"


class LoopStatus(models.TextChoices):
    ACTIVE = "active"
    STOPPED = "stopped"  # by the user, the agent, an operator, or its session went away
    FINISHED = "finished"  # max_runs runs were sent


LOOP_TRANSITIONS: dict[str, frozenset[str]] = {
    LoopStatus.ACTIVE: frozenset({LoopStatus.STOPPED, LoopStatus.FINISHED}),
    LoopStatus.STOPPED: frozenset(),
    LoopStatus.FINISHED: frozenset(),
}


class Loop(models.Model):
    """A prompt sent into its session as a user message every ``interval_seconds``.

    Tick ``k`` is due at ``anchor_at + k * interval_seconds``; ``next_tick`` is the first tick
    not yet taken, and ``next_run_at`` its time (``None`` once the loop ended).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(
        "agent_sessions.Session", on_delete=models.CASCADE, related_name="loops"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_loops"
    )
    prompt = models.TextField()
    interval_seconds = models.PositiveIntegerField()
    max_runs = models.PositiveIntegerField()
    runs = models.PositiveIntegerField(default=0)  # messages sent (skipped ticks not counted)
    status = models.CharField(max_length=16, choices=LoopStatus.choices,
                              default=LoopStatus.ACTIVE)
    anchor_at = models.DateTimeField()
    next_tick = models.PositiveIntegerField(default=0)
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    stop_reason = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            # the scheduler: due active loops, soonest first
            models.Index(fields=["status", "next_run_at"], name="loop_due"),
            models.Index(fields=["user", "-created_at"], name="loop_user_recent"),
            models.Index(fields=["session", "-created_at"], name="loop_session_recent"),
        ]

    def __str__(self) -> str:
        return f"loop {self.id} ({self.status})"


class LoopRunStatus(models.TextChoices):
    SENT = "sent"  # its message was queued into the session
    SKIPPED = "skipped"  # due, but not sent (see ``reason``)


class LoopRun(models.Model):
    """One tick of a loop, taken once; ``message`` is the user message it sent."""

    loop = models.ForeignKey(Loop, on_delete=models.CASCADE, related_name="ticks")
    tick = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=LoopRunStatus.choices)
    reason = models.CharField(max_length=255, blank=True, default="")
    message = models.ForeignKey(
        "agent_sessions.Message", null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )
    due_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["loop", "tick"], name="looprun_once_per_tick"),
        ]

    def __str__(self) -> str:
        return f"tick {self.tick} of loop {self.loop_id} ({self.status})"


class SubAgentStatus(models.TextChoices):
    RUNNING = "running"
    COMPLETED = "completed"  # its turn ended with an answer
    FAILED = "failed"  # its turn failed (the error is the result)
    STOPPED = "stopped"  # stopSubAgent, v1.subagent.stop, or the turn that waited on it ended


SUBAGENT_ENDED = (SubAgentStatus.COMPLETED, SubAgentStatus.FAILED, SubAgentStatus.STOPPED)


class SubAgent(models.Model):
    """A child session started by the ``subAgent`` tool (``apps.tasks.subagents``).

    One row per tool call: ``call_message`` (the parent's ``toolcall_input`` message) is unique,
    so a step repeated after a crash finds its child instead of starting a second one. The row
    leaves ``running`` once, by one conditional UPDATE (``subagents.finish``), and its
    ``result`` is then what the parent is told.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_subagents"
    )
    session = models.OneToOneField(  # the child
        "agent_sessions.Session", on_delete=models.CASCADE, related_name="sub_agent"
    )
    parent_session = models.ForeignKey(
        "agent_sessions.Session", on_delete=models.CASCADE, related_name="sub_agents"
    )
    parent_turn = models.ForeignKey(
        "turns.Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    call_message = models.OneToOneField(
        "agent_sessions.Message", null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )
    tool_call_id = models.CharField(max_length=128, blank=True, default="")
    title = models.CharField(max_length=255)
    mode = models.CharField(max_length=8, choices=[("sync", "sync"), ("async", "async")])
    depth = models.PositiveSmallIntegerField(default=1)  # 1: a child of a root session
    status = models.CharField(max_length=16, choices=SubAgentStatus.choices,
                              default=SubAgentStatus.RUNNING)
    result = models.TextField(blank=True, default="")  # the child's final answer or error
    ended_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "sub-agent"
        indexes = [
            models.Index(fields=["parent_session", "created_at"], name="subagent_parent"),
            models.Index(fields=["parent_turn", "status"], name="subagent_turn_status"),
        ]

    def __str__(self) -> str:
        return f"sub-agent {self.title} ({self.status})"
