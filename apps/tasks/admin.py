"""Operator console for goals, loops and sub-agents.

Statuses are read-only: they move through the services only. Actions call the same services as
the RPCs, on behalf of each row's owner (so the owner's widget gets the Updates): cancel a goal,
stop a loop. A loop shows its latest ticks inline.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.sessions.admin import short
from rtcagent.errors import RtcError

from .goals import goal_end
from .loops import loop_stop
from .models import Goal, GoalStatus, Loop, LoopRun, SubAgent, SubAgentStatus

INLINE_LIMIT = 50


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # created by users and agents only, through the services


@admin.register(Goal)
class GoalAdmin(_ReadOnly):
    list_display = ("id", "user", "text", "status", "rounds", "max_rounds", "updated_at")
    list_select_related = ("user",)
    list_filter = ("status",)
    search_fields = ("id", "condition", "session__id", "user__email")
    raw_id_fields = ("session", "user", "last_turn")
    readonly_fields = ("id", "session", "user", "condition", "status", "rounds", "max_rounds",
                       "last_turn", "outcome", "ended_at", "created_at", "updated_at")
    ordering = ("-updated_at",)
    actions = ("cancel_goals",)

    @admin.display(description="condition", ordering="condition")
    def text(self, obj: Goal) -> str:
        return short(" ".join(obj.condition.split()), 60)

    @admin.action(description="Cancel", permissions=("change",))
    def cancel_goals(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        cancelled = 0
        for goal in queryset.filter(status=GoalStatus.ACTIVE).only("session_id", "user_id"):
            try:
                change = goal_end(user_id=goal.user_id, session_id=goal.session_id,
                                  to=GoalStatus.CANCELLED, outcome="cancelled by an operator")
            except RtcError as exc:  # its session was deleted
                self.message_user(request, f"{goal.id}: {exc}", messages.WARNING)
                continue
            cancelled += bool(change.updates)
        self.message_user(request, f"Cancelled {cancelled} goal(s).", messages.SUCCESS)


class LoopRunInline(admin.TabularInline):
    model = LoopRun
    extra = 0
    can_delete = False
    verbose_name_plural = f"ticks (the latest {INLINE_LIMIT})"
    fields = ("tick", "status", "reason", "message", "due_at", "created_at")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        qs = super().get_queryset(request)
        match = request.resolver_match
        object_id = match.kwargs.get("object_id") if match is not None else None
        if object_id is None:
            return qs.none()
        latest = (qs.filter(loop_id=object_id).order_by("-tick")
                  .values_list("pk", flat=True)[:INLINE_LIMIT])
        return qs.filter(pk__in=list(latest)).order_by("-tick")


@admin.register(Loop)
class LoopAdmin(_ReadOnly):
    list_display = ("id", "user", "text", "status", "interval_seconds", "runs", "max_runs",
                    "next_run_at")
    list_select_related = ("user",)
    list_filter = ("status",)
    search_fields = ("id", "prompt", "session__id", "user__email")
    raw_id_fields = ("session", "user")
    readonly_fields = ("id", "session", "user", "prompt", "interval_seconds", "max_runs",
                       "runs", "status", "anchor_at", "next_tick", "next_run_at", "last_run_at",
                       "stop_reason", "created_at", "updated_at")
    ordering = ("-created_at",)
    inlines = (LoopRunInline,)
    actions = ("stop_loops",)

    @admin.display(description="prompt", ordering="prompt")
    def text(self, obj: Loop) -> str:
        return short(" ".join(obj.prompt.split()), 60)

    @admin.action(description="Stop", permissions=("change",))
    def stop_loops(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        stopped = 0
        for loop in queryset.only("id", "user_id"):
            try:
                change = loop_stop(user_id=loop.user_id, loop_id=loop.id,
                                   reason="stopped by an operator")
            except RtcError as exc:  # its session was deleted
                self.message_user(request, f"{loop.id}: {exc}", messages.WARNING)
                continue
            stopped += bool(change.updates)
        self.message_user(request, f"Stopped {stopped} loop(s).", messages.SUCCESS)


@admin.register(SubAgent)
class SubAgentAdmin(_ReadOnly):
    """Sub-agents (``docs/subagents.md``); "Stop" stops each one's subtree, leaves first."""

    list_display = ("id", "user", "title", "mode", "status", "depth", "created_at", "ended_at")
    list_select_related = ("user",)
    list_filter = ("status", "mode")
    search_fields = ("id", "title", "session__id", "parent_session__id", "user__email")
    raw_id_fields = ("session", "parent_session", "parent_turn", "call_message", "user")
    readonly_fields = ("id", "user", "session", "parent_session", "parent_turn", "call_message",
                       "tool_call_id", "title", "mode", "depth", "status", "result", "ended_at",
                       "created_at", "updated_at")
    ordering = ("-created_at",)
    actions = ("stop_sub_agents",)

    @admin.action(description="Stop (with the sub-agents it started)", permissions=("change",))
    def stop_sub_agents(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        from .subagents import stop_tree

        stopped = 0
        for sub in queryset.filter(status=SubAgentStatus.RUNNING).only("session_id"):
            stopped += len(stop_tree(sub.session_id, reason="stopped by an operator"))
        self.message_user(request, f"{stopped} sub-agent(s) stopped.", messages.SUCCESS)
