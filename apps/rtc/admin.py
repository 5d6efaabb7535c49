"""Operator console for remote tool calls. The status is read-only: it moves only forward,
through ``services.rtc_transition``."""

from __future__ import annotations

from django.contrib import admin

from apps.sessions.admin import session_label, short

from .models import Rtc


@admin.register(Rtc)
class RtcAdmin(admin.ModelAdmin):
    list_display = ("tool", "status", "needs_approval", "session_name", "user", "created_at")
    list_select_related = ("session", "user")
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

    @admin.display(description="tool", ordering="tool_name")
    def tool(self, obj: Rtc) -> str:
        return short(obj.tool_name, 24)

    @admin.display(description="session", ordering="session__title")
    def session_name(self, obj: Rtc) -> str:
        return session_label(obj.session)
