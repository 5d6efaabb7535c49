"""Operator console for turns: read-only (a status moves only through
``services.turn_transition``), with the one action an operator needs, stop.

A failed turn shows what went wrong: its error category and title (``Turn.error_message`` is
``"<category>: <title>"``, written by ``runner.fail``), the user-facing message and, when the
server keeps them (``RTC_SHOW_RAW_ERRORS``), the provider's raw error, both from the turn's
``error`` message (``runner.add_error_message``; at most 20 per session and hour, so it may be
missing), and the request it failed on: the user message that triggered it.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from apps.sessions.admin import content_preview, session_label
from apps.sessions.models import Message
from rtcagent.errors import RtcError

from .models import ACTIVE_TURN_STATUSES, LLMCall, Turn, TurnStatus


def error_parts(turn: Turn) -> tuple[str, str]:
    category, _, title = turn.error_message.partition(":")
    return (category.strip(), title.strip()) if title else ("", turn.error_message)


_CALL_FIELDS = ("step", "purpose", "model", "prompt_tokens", "cached_tokens", "cache_write_tokens",
                "completion_tokens", "reasoning_tokens", "prompt_estimate", "cost_usd",
                "shared_prefix_ratio", "created_at")


class LLMCallInline(admin.TabularInline):
    """The turn's model calls as the provider billed them (read-only)."""

    model = LLMCall
    fields = _CALL_FIELDS
    readonly_fields = _CALL_FIELDS
    extra = 0
    can_delete = False
    ordering = ("created_at", "id")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(LLMCall)
class LLMCallAdmin(admin.ModelAdmin):
    """Every model call: tokens (cached, cache writes, reasoning), cost and the share of the
    prompt that repeated the previous request's. Read-only: written by
    ``accounting.record_answer``."""

    list_display = ("created_at", "purpose", "model", "session_name", "turn_link", "step",
                    "prompt_tokens",
                    "cached_tokens", "cache_write_tokens", "completion_tokens",
                    "reasoning_tokens", "cost_usd", "shared_prefix_ratio")
    list_select_related = ("session",)
    list_filter = ("purpose", "model", "usage_reported")
    search_fields = ("session__id", "turn__id", "model")
    date_hierarchy = "created_at"
    ordering = ("-created_at", "-id")
    fields = ("session", "turn", "message", "usage_reported", *_CALL_FIELDS, "total_tokens")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="session", ordering="session__title")
    def session_name(self, obj: LLMCall) -> str:
        return session_label(obj.session)

    @admin.display(description="turn")
    def turn_link(self, obj: LLMCall) -> str:
        if obj.turn_id is None:  # a manual compaction or a memory extraction
            return "—"
        url = reverse("admin:turns_turn_change", args=[obj.turn_id])
        return format_html('<a href="{}">{}…</a>', url, str(obj.turn_id)[:8])


@admin.register(Turn)
class TurnAdmin(admin.ModelAdmin):
    list_display = ("short_id", "session_name", "user", "status", "error", "total_tokens",
                    "created_at")
    list_select_related = ("session", "user")
    list_filter = ("status",)
    search_fields = ("id", "client_id", "session__id", "session__title", "user__email")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    actions = ("stop_turns",)
    inlines = (LLMCallInline,)
    fieldsets = (
        (None, {"fields": ("id", "session", "user", "status", "client_id", "messages_link")}),
        ("Failure", {"fields": ("error_category", "error_title", "error_detail",
                                "request")}),
        ("Usage", {"fields": ("input_tokens", "cached_tokens", "output_tokens",
                              "reasoning_tokens", "total_tokens")}),
        ("Times", {"fields": ("created_at", "started_at", "stop_requested_at", "completed_at",
                              "updated_at")}),
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is not None and obj.status == TurnStatus.FAILED:
            return self.fieldsets
        return tuple(fs for fs in self.fieldsets if fs[0] != "Failure")

    @admin.display(description="turn", ordering="id")
    def short_id(self, obj: Turn) -> str:
        return f"{str(obj.id)[:8]}…"

    @admin.display(description="session", ordering="session__title")
    def session_name(self, obj: Turn) -> str:
        return session_label(obj.session)

    @admin.display(description="error", ordering="error_message")
    def error(self, obj: Turn) -> str:
        return error_parts(obj)[0] or obj.error_message[:40]

    @admin.display(description="messages")
    def messages_link(self, obj: Turn) -> str:
        url = reverse("admin:agent_sessions_message_changelist")
        return format_html('<a href="{}?turn={}">the messages of this turn</a>', url, obj.pk)

    @admin.display(description="category")
    def error_category(self, obj: Turn) -> str:
        return error_parts(obj)[0] or "-"

    @admin.display(description="title")
    def error_title(self, obj: Turn) -> str:
        return error_parts(obj)[1] or "-"

    @admin.display(description="message")
    def error_detail(self, obj: Turn) -> str:
        row = Message.objects.filter(user_id=obj.user_id, client_id=f"turn:{obj.pk}:error").first()
        data = (row.content or {}).get("data") if row is not None else None
        if not isinstance(data, dict):
            return "(no error message was stored: at most 20 per session and hour)"
        retry = "retryable" if data.get("retryable") else "not retryable"
        raw = data.get("raw_error") or "(not kept: RTC_SHOW_RAW_ERRORS is off)"
        return format_html("{}<br><small>{}</small><br><small>raw error: <code>{}</code></small>",
                           data.get("message", ""), retry, raw)

    @admin.display(description="request it failed on")
    def request(self, obj: Turn) -> str:
        msg = obj.trigger_message
        if msg is None:
            return "-"
        url = reverse("admin:agent_sessions_message_change", args=[msg.pk])
        return format_html('<a href="{}">message #{}</a>: {}', url, msg.global_offset,
                           content_preview(msg.content, limit=2000))

    def has_stop_permission(self, request: HttpRequest) -> bool:
        """Stopping needs the change permission, although no form ever changes a turn."""
        return request.user.has_perm("turns.change_turn")

    @admin.action(description="Stop (a running turn stops within a second)",
                  permissions=("stop",))
    def stop_turns(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        from .services import turn_stop

        open_turns = queryset.filter(status__in=ACTIVE_TURN_STATUSES).only("session_id",
                                                                          "user_id")
        asked = 0
        for turn in open_turns:
            try:
                asked += turn_stop(user_id=turn.user_id, session_id=turn.session_id) is not None
            except RtcError as exc:  # its session was deleted
                self.message_user(request, f"{turn.pk}: {exc}", messages.WARNING)
        skipped = queryset.count() - asked
        note = f"; {skipped} had ended or could not be stopped" if skipped else ""
        self.message_user(request, f"Asked {asked} turn(s) to stop{note}.", messages.SUCCESS)
