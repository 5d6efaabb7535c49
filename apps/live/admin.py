"""Live calls and channels in the admin: read, and stop a running call."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages

from . import services
from .models import Channel, LiveCall, LiveStatus


@admin.register(Channel)
class ChannelAdmin(admin.ModelAdmin):
    list_display = ("name", "user", "direction", "realtime", "session", "created_at")
    list_filter = ("direction", "realtime")
    search_fields = ("name", "user__username")
    raw_id_fields = ("user", "session")
    readonly_fields = ("created_at", "updated_at")


@admin.register(LiveCall)
class LiveCallAdmin(admin.ModelAdmin):
    list_display = ("title", "user", "status", "input_channel", "output_channel", "inputs",
                    "interruptions", "created_at", "stopped_at")
    list_filter = ("status",)
    search_fields = ("title", "user__username", "input_channel", "output_channel")
    raw_id_fields = ("user", "parent_session", "session", "call_message")
    readonly_fields = ("inputs", "interruptions", "created_at", "stopped_at", "stop_reason")
    actions = ["stop_calls"]

    @admin.action(description="Stop the selected live calls", permissions=["change"])
    def stop_calls(self, request: Any, queryset: Any) -> None:
        stopped = sum(
            services.call_stop(call, reason="stopped by an administrator", notify=True)
            for call in queryset.filter(status=LiveStatus.RUNNING))
        self.message_user(request, f"{stopped} live call(s) stopped.", messages.SUCCESS)
