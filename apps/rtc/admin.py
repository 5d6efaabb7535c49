"""Operator console for remote tool calls. The status is read-only: it moves only forward,
through ``services.rtc_transition``."""

from __future__ import annotations

from django.contrib import admin

from .models import Rtc


@admin.register(Rtc)
class RtcAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "tool_name",
        "status",
        "needs_approval",
        "session",
        "user",
        "deadline",
        "created_at",
    )
    list_filter = ("status", "tool_name", "needs_approval")
    search_fields = ("id", "tool_call_id", "client_id", "session__id", "turn__id", "user__email")
    raw_id_fields = ("session", "turn", "user", "message", "output_message")
    readonly_fields = (
        "id",
        "status",
        "result",
        "client_id",
        "sent_at",
        "started_at",
        "completed_at",
        "created_at",
        "updated_at",
    )
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
