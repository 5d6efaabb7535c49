"""Operator console for turns. The status is read-only: it moves only through
``services.turn_transition``."""

from __future__ import annotations

from django.contrib import admin

from .models import Turn


@admin.register(Turn)
class TurnAdmin(admin.ModelAdmin):
    list_display = ("id", "session", "user", "status", "total_tokens", "started_at", "created_at")
    list_filter = ("status",)
    search_fields = ("id", "client_id", "session__id", "session__title", "user__email")
    raw_id_fields = ("session", "user", "trigger_message")
    readonly_fields = ("id", "status", "started_at", "completed_at", "created_at", "updated_at")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
